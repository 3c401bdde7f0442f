// Connection helpers shared by every gRPC client of the coordinator (the `xmod`
// command and worker groups): channel credentials and the bearer token.
#ifndef XMOD_PROTO_CHANNEL_H_
#define XMOD_PROTO_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace xmod {

struct ChannelOptions {
  std::string address;  // host:port
  std::string token;    // sent as "authorization: Bearer <token>" when not empty
  std::string tls_ca;   // PEM file of the CA that signed the server's certificate; empty: plaintext
};

// NOT_FOUND when the CA file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options);

// Reads a token file: its first line, trimmed. NOT_FOUND / INVALID_ARGUMENT (empty).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A client context with the token attached and a deadline `seconds` from now.
std::unique_ptr<grpc::ClientContext> MakeContext(const std::string& token, double seconds);

// grpc::Status <-> absl::Status (the codes are the same numbers).
absl::Status FromGrpc(const grpc::Status& status, const std::string& rpc);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace xmod

#endif  // XMOD_PROTO_CHANNEL_H_
