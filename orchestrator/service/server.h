// The coordinator's gRPC server: thin handlers over the Scheduler (each checks the
// bearer token, converts the message, calls one scheduler method, converts back),
// plus a background thread that expires overdue leases.
#ifndef XMOD_ORCHESTRATOR_SERVICE_SERVER_H_
#define XMOD_ORCHESTRATOR_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "orchestrator/scheduler/scheduler.h"

namespace xmod {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // port 0 picks a free port
  // Roles. `token` is the operator's: every RPC accepts it. `worker_token`, when
  // set, is the worker groups': it is accepted by the worker RPCs (register,
  // lease, heartbeat, report, complete, fail) only, and a call of an operator RPC
  // (submit, status, jobs, resume, cancel) with it is PERMISSION_DENIED. Without a
  // worker token, the one token serves both roles; without any, calls are open
  // (loopback only, unless insecure).
  std::string token;
  std::string worker_token;
  std::string tls_cert;  // PEM files; both or neither
  std::string tls_key;
  bool insecure = false;  // allow a non-loopback address without a token
};

// Runs one handler's body so that no call ends as UNKNOWN: an allocation failure
// becomes RESOURCE_EXHAUSTED, any other exception INTERNAL, each naming the RPC.
grpc::Status GuardRpc(const char* rpc, const std::function<grpc::Status()>& body);

class CoordinatorServer {
 public:
  // Starts serving. INVALID_ARGUMENT for a non-loopback address without a token
  // (and without insecure), a worker token without an operator token, a worker
  // token equal to the operator's, or half a TLS pair; NOT_FOUND for unreadable TLS files;
  // UNAVAILABLE when the address cannot be bound. `scheduler` must outlive the server.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Scheduler* scheduler,
                                                                  const ServerOptions& options);
  ~CoordinatorServer();

  int port() const;
  std::string address() const;         // host:port clients on this machine can dial
  std::string listen_address() const;  // the listen host as given, with the bound port

  // Stops granting leases, tells holders to drain, then stops serving.
  void Shutdown();
  // Blocks until Shutdown() (from another thread or a signal handler thread).
  void Wait();

 private:
  struct Impl;
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SERVICE_SERVER_H_
