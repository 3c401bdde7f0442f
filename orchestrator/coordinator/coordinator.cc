#include "orchestrator/coordinator/coordinator.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "common/status_macros.h"

namespace xmod {

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : &system_clock_) {}

Coordinator::~Coordinator() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options)));
  RETURN_IF_ERROR(c->InitStore());
  c->InitOrder();
  c->InitScheduler();
  return c;
}

absl::Status Coordinator::Serve() {
  if (absl::Status started = InitGrpcServer(); !started.ok()) {
    if (created_db_) RemoveCreatedDatabase();
    return started;
  }
  InitOrderRefit();
  if (absl::Status started = InitDashboard(); !started.ok()) {
    Shutdown();
    return started;
  }
  return absl::OkStatus();
}

void Coordinator::Shutdown() {
  dashboard_.reset();
  if (server_ != nullptr) server_->Shutdown();
}

absl::Status Coordinator::InitStore() {
  created_db_ = !std::filesystem::exists(options_.db);
  SqliteStore::Options store_options;
  store_options.path = options_.db;
  store_options.clock = clock_;
  ASSIGN_OR_RETURN(store_, SqliteStore::Open(store_options));
  return absl::OkStatus();
}

void Coordinator::InitOrder() {
  LawDrivenOrder::Options order_options;
  order_options.log = options_.log;
  order_ = std::make_unique<LawDrivenOrder>(store_.get(), order_options);
}

void Coordinator::InitScheduler() {
  SchedulerOptions scheduler_options;
  scheduler_options.lease_ttl_seconds = options_.lease_ttl_seconds;
  scheduler_options.max_jobs = options_.max_jobs;
  LawDrivenOrder* order = order_.get();
  scheduler_options.on_complete = [order](const std::string& id) { order->JobCompleted(id); };
  scheduler_ = std::make_unique<Scheduler>(store_.get(), scheduler_options);
}

absl::Status Coordinator::InitGrpcServer() {
  ASSIGN_OR_RETURN(server_, CoordinatorServer::Start(scheduler_.get(), options_.server));
  return absl::OkStatus();
}

void Coordinator::InitOrderRefit() { order_->RefitAll(); }

absl::Status Coordinator::InitDashboard() {
  if (options_.http.empty()) return absl::OkStatus();
  DashboardOptions dashboard_options;
  dashboard_options.listen = options_.http;
  dashboard_options.token = options_.server.token;
  ASSIGN_OR_RETURN(dashboard_,
                   DashboardServer::Start(store_.get(), scheduler_.get(), dashboard_options));
  return absl::OkStatus();
}

void Coordinator::RemoveCreatedDatabase() {
  // The scheduler and the order hold the store: they go first.
  scheduler_.reset();
  order_.reset();
  store_.reset();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ignored;
    std::filesystem::remove(options_.db + suffix, ignored);
  }
}

}  // namespace xmod
