// The coordinator's logic, free of gRPC: submitting sweeps, registering worker
// groups, leasing jobs with fencing tokens, renewing and expiring leases,
// accepting metrics, checkpoints and results from the current lease holder only.
// The job state machine and the lease rules are drawn once, in docs/protocol.md.
//
// Thread-safe (the store serializes writes).
#ifndef XMOD_ORCHESTRATOR_SCHEDULER_SCHEDULER_H_
#define XMOD_ORCHESTRATOR_SCHEDULER_SCHEDULER_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/expand.h"

namespace xmod {

// The shortest lease the coordinator grants. Groups beat every TTL/3 and bound
// their reconnection by TTL/6 (worker/client/coordinator_client.h); below a
// second, an ordinary pause of the coordinator's host would expire healthy leases.
inline constexpr double kMinLeaseTtlSeconds = 1.0;
inline constexpr double kMaxLeaseTtlSeconds = 86400.0;

// INVALID_ARGUMENT naming `flag` unless kMinLeaseTtlSeconds <= ttl <= kMaxLeaseTtlSeconds.
absl::Status CheckLeaseTtl(double ttl, const std::string& flag);

struct SchedulerOptions {
  double lease_ttl_seconds = 30.0;
  int64_t max_metrics_per_batch = 10000;
  int64_t max_jobs = kDefaultMaxJobs;  // the most jobs one submitted sweep may expand to
  // Called after a job's success is committed (the law-driven order's refitter,
  // orchestrator/order); must not block.
  std::function<void(const std::string& job_id)> on_complete;
};

struct LeaseOutcome {
  std::optional<LeaseGrant> grant;
  bool done = false;  // no grant, jobs exist, and none is pending or running
};

enum class HeartbeatAction { kContinue, kCancel, kDrain };

struct ReportedMetric {
  std::string name;
  int64_t step = 0;
  double value = 0.0;
  int64_t tokens = 0;
  double flops = 0.0;
};

class Scheduler {
 public:
  // `store` is not owned and must outlive the scheduler; time is the store's
  // clock (SqliteStore::Options::clock), so rows and leases share one clock.
  Scheduler(SqliteStore* store, SchedulerOptions options);

  double lease_ttl() const { return options_.lease_ttl_seconds; }

  // Parses, validates and expands the YAML text, then records it. INVALID_ARGUMENT
  // with "source:line: field: ..." lines for a malformed file (nothing written).
  // The one submit path (the SubmitSweep RPC, `xmod submit --db`, `xmod run`):
  // parse, expand, the design check (refused unless `allow_unidentifiable`), then
  // the store. Nothing is written on any error.
  absl::StatusOr<SubmitResult> Submit(const std::string& yaml, const std::string& source,
                                      bool allow_unidentifiable = false);

  // INVALID_ARGUMENT for ranks < 1 or an empty host. Returns the new worker id.
  // `build`: the group's build and libraries as a JSON object (or empty), kept
  // with each attempt it makes; INVALID_ARGUMENT when it is not an object.
  absl::StatusOr<std::string> RegisterWorker(const std::string& host, int64_t ranks,
                                             const std::string& name,
                                             const std::string& build = "");

  // Leases the next job that fits the group (overdue leases are ended by
  // ExpireLeases, which the server runs every TTL/4). NOT_FOUND for an
  // unregistered worker.
  // `request_id`: see SqliteStore::LeaseNextJob (a retried request gets its lease back).
  absl::StatusOr<LeaseOutcome> Lease(const std::string& worker_id,
                                     const std::string& request_id = "");

  absl::StatusOr<HeartbeatAction> Heartbeat(const std::string& worker_id, const std::string& job_id,
                                            int64_t token, int64_t step);

  // INVALID_ARGUMENT: empty or oversized batch, a negative step, a non-finite
  // value (a divergence must be reported with Fail), an empty name.
  absl::Status ReportMetrics(const std::string& job_id, int64_t token,
                             const std::vector<ReportedMetric>& metrics);
  absl::Status ReportCheckpoint(const std::string& job_id, int64_t token, int64_t step,
                                const std::string& path, const std::string& checksum);
  // Steps are checked against the attempt (lease_rules.h CheckReportedStep): a job
  // completes only at its last step; a failure, a heartbeat or a metric lies within
  // 0..steps; a checkpoint is new work of this attempt. INVALID_ARGUMENT otherwise.
  absl::Status Complete(const std::string& job_id, int64_t token, int64_t step);
  absl::StatusOr<JobState> Fail(const std::string& job_id, int64_t token, AttemptEnd end,
                                const std::string& message, int64_t step = 0);

  // Gives every lease a full TTL from now: call once when a coordinator starts on a
  // file, so that groups which kept training while it was down are not failed.
  // Those leases are remembered until their group is heard from again (a
  // heartbeat, metrics or a checkpoint under the same token).
  absl::StatusOr<int64_t> GraceLeases();

  // Ends every overdue lease; returns how many. A lease given grace at the start
  // and never heard from since ends as preempted, not counted: its group left
  // while the coordinator was away (workers give up after --unreachable-timeout),
  // which is no fault of the job's.
  absl::StatusOr<int64_t> ExpireLeases();

  // ---- Reads and operator actions (the service reaches the store only here) ----
  // Every sweep when `sweep` is empty; NOT_FOUND for an unknown named sweep.
  // With `jobs` and a named sweep, also that sweep's jobs (read for the summary
  // anyway, so a caller that shows both reads them once).
  absl::StatusOr<std::vector<SweepSummary>> Status(const std::string& sweep,
                                                   std::vector<JobProgressRow>* jobs = nullptr);
  absl::StatusOr<std::vector<JobProgressRow>> Jobs(const std::string& sweep);
  // Failed and cancelled jobs back to pending with a fresh attempt budget.
  absl::StatusOr<int64_t> Resume(const std::string& sweep);
  // A sweep's active jobs, or one job, to cancelled.
  absl::StatusOr<int64_t> Cancel(const std::string& sweep_or_job);

  // While draining, heartbeats answer DRAIN and no new lease is granted.
  void SetDraining(bool draining) { draining_ = draining; }

 private:
  SqliteStore* store_;
  Clock* clock_;  // the store's
  SchedulerOptions options_;
  std::atomic<bool> draining_{false};
  std::mutex ranks_mu_;
  std::map<std::string, int64_t> worker_ranks_;  // guarded by ranks_mu_; a cache of the store
  std::atomic<uint64_t> worker_counter_{0};
  // Leases held when this coordinator started (GraceLeases), by job id -> fencing
  // token, until their group is heard from. any_graced_ spares the lock on every
  // call once the set is empty.
  void HeardFromLeaseHolder(const std::string& job_id);
  std::mutex graced_mu_;
  LeaseTokens graced_;      // guarded by graced_mu_
  double grace_until_ = 0;  // guarded by graced_mu_; the grace's end (GraceLeases)
  std::atomic<bool> any_graced_{false};
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SCHEDULER_SCHEDULER_H_
