// The coordinator process, assembled in one place: the store on its database
// file, the law-driven order, the scheduler, the gRPC server and, when asked for,
// the dashboard, all reading one clock. `xmod serve` and `xmod run` both build it;
// they differ in their options and in what they do between Open and Serve
// (`xmod run` submits its sweep there). Each part is started by a named Init step,
// in the order the parts depend on each other, as Ray's GcsServer::DoStart does.
//
// Not thread-safe itself: Open, Serve and Shutdown are called from one thread.
// The parts it hands out (store, scheduler) are thread-safe as their headers say.
#ifndef XMOD_ORCHESTRATOR_COORDINATOR_COORDINATOR_H_
#define XMOD_ORCHESTRATOR_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "orchestrator/dashboard/http_server.h"
#include "orchestrator/order/law_order.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/service/server.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

struct CoordinatorOptions {
  std::string db;        // the SQLite file; created when missing
  ServerOptions server;  // the gRPC side: listen address, TLS, operator and worker tokens
  double lease_ttl_seconds = 30.0;
  int64_t max_jobs = kDefaultMaxJobs;  // the most jobs one submitted sweep may expand to
  // The dashboard's HOST:PORT; empty for none. It takes server.token as its
  // operator token (never the workers').
  std::string http;
  // The one clock of the store's rows, the scheduler's leases and the dashboard's
  // elapsed times and ETAs. Not owned; the system clock when null.
  Clock* clock = nullptr;
  // Receives the law-driven order's lines (one per refit); may be empty.
  std::function<void(const std::string& line)> log;
};

class Coordinator {
 public:
  // InitStore, InitOrder, InitScheduler: the database is open and migrated and
  // the scheduler can submit, but nothing listens yet. Errors are the store's
  // (SqliteStore::Open).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options);

  // InitGrpcServer, InitOrderRefit, InitDashboard: serves worker groups and
  // operators, queues a refit of every adaptive sweep (a coordinator starting on a
  // file steers from the results it already holds), then opens the dashboard.
  // Errors are CoordinatorServer::Start's and DashboardServer::Start's. When the
  // gRPC server cannot start, a database file that Open created is removed again,
  // so that a failed start leaves nothing behind; the coordinator is then only fit
  // to be destroyed. Call once.
  absl::Status Serve();

  // Stops the dashboard, then the gRPC server (holders of leases are told to
  // drain). Idempotent; the destructor calls it.
  void Shutdown();
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  SqliteStore& store() { return *store_; }
  Scheduler& scheduler() { return *scheduler_; }
  Clock& clock() { return *clock_; }
  // After a successful Serve.
  CoordinatorServer& server() { return *server_; }
  // After a successful Serve; null without options.http.
  DashboardServer* dashboard() { return dashboard_.get(); }

 private:
  explicit Coordinator(CoordinatorOptions options);
  absl::Status InitStore();
  void InitOrder();
  void InitScheduler();
  absl::Status InitGrpcServer();
  void InitOrderRefit();
  absl::Status InitDashboard();
  // Closes the store and deletes the database file with its journal files.
  void RemoveCreatedDatabase();

  CoordinatorOptions options_;
  SystemClock system_clock_;
  Clock* clock_;             // options_.clock, or system_clock_
  bool created_db_ = false;  // Open made the file
  // Destroyed in reverse: the dashboard and server first, the store last.
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<LawDrivenOrder> order_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<DashboardServer> dashboard_;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_COORDINATOR_COORDINATOR_H_
