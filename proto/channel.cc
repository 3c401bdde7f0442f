#include "proto/channel.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace xmod {

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (options.reconnect_max_seconds > 0) {
    const int ms = static_cast<int>(std::clamp(options.reconnect_max_seconds, 0.05, 60.0) * 1000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(ms, 100));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, ms);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, ms);
  }
  if (options.tls_ca.empty()) {
    return grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args);
  }
  std::ifstream in(options.tls_ca);
  if (!in) return absl::NotFoundError(absl::StrCat(options.tls_ca, ": cannot read the CA file"));
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::CreateCustomChannel(options.address, grpc::SslCredentials(ssl), args);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the token file"));
  std::string line;
  std::getline(in, line);
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the token file is empty"));
  }
  return line.substr(first, last - first + 1);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const std::string& token, double seconds,
                                                 bool wait_for_ready) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_wait_for_ready(wait_for_ready);
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
  return context;
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& rpc) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, ": ", status.error_message()));
}

const char* GrpcCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(sizeof(kNames) / sizeof(kNames[0])) ? kNames[i]
                                                                            : "UNKNOWN_CODE";
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace xmod
