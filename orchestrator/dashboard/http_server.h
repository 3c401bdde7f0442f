// The dashboard's HTTP server (docs/dashboard.md) over cpp-httplib: the embedded
// pages and the JSON endpoints of api.h, read-only. Loopback by default; on any
// other address an operator token is required (the same rule as the gRPC side),
// presented as `Authorization: Bearer TOKEN` or as the cookie that
// `/login?token=TOKEN` sets, and compared in constant time. Only GET and HEAD
// exist; every other method is 405. Each JSON answer carries an ETag, and a
// request whose If-None-Match matches gets 304 with no body, so polling pages
// cost little.
#ifndef XMOD_ORCHESTRATOR_DASHBOARD_HTTP_SERVER_H_
#define XMOD_ORCHESTRATOR_DASHBOARD_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/store/store_reader.h"

namespace httplib {
class Server;
}

namespace xmod {

struct DashboardOptions {
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  std::string token;                      // operator token; required off loopback
};

class DashboardServer {
 public:
  // Binds and starts serving on its own threads. INVALID_ARGUMENT for a malformed
  // address or a non-loopback one without a token; UNAVAILABLE when the bind fails.
  // `store` and `scheduler` are not owned and must outlive the server. Elapsed
  // times and ETAs are measured on the store's clock (StoreReader::Now), the one
  // the scheduler and the rows' timestamps use.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(StoreReader* store,
                                                                Scheduler* scheduler,
                                                                DashboardOptions options);
  ~DashboardServer();  // stops and joins
  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  int port() const { return port_; }
  std::string address() const;  // host:port as bound

 private:
  DashboardServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listening_done_{false};
  std::string host_;
  int port_ = 0;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_DASHBOARD_HTTP_SERVER_H_
