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
  // Longest wait between two connection attempts after the coordinator went away
  // (and the timeout of one attempt). 0 keeps gRPC's defaults (up to 120 s between
  // attempts, 20 s per attempt), which a worker group cannot afford: a restarted
  // coordinator grants held leases one TTL, and the group must be back within it.
  double reconnect_max_seconds = 0;
};

// NOT_FOUND when the CA file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options);

// Reads a token file: its first line, trimmed. NOT_FOUND / INVALID_ARGUMENT (empty).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A client context with the token attached and a deadline `seconds` from now.
// `wait_for_ready`: while the channel is not connected the call waits (until the
// deadline) for it to connect, instead of failing at once with UNAVAILABLE.
std::unique_ptr<grpc::ClientContext> MakeContext(const std::string& token, double seconds,
                                                 bool wait_for_ready = false);

// grpc::Status <-> absl::Status (the codes are the same numbers).
absl::Status FromGrpc(const grpc::Status& status, const std::string& rpc);

// The name of a gRPC status code ("UNAVAILABLE"), for logs.
const char* GrpcCodeName(grpc::StatusCode code);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace xmod

#endif  // XMOD_PROTO_CHANNEL_H_
