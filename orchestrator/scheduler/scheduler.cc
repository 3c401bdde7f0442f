#include "orchestrator/scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/design_check.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

Scheduler::Scheduler(SqliteStore* store, SchedulerOptions options)
    : store_(store), clock_(&store->clock()), options_(options) {}

absl::StatusOr<SubmitResult> Scheduler::Submit(const std::string& yaml, const std::string& source,
                                               bool allow_unidentifiable) {
  const std::string where = source.empty() ? "<submitted>" : source;
  ASSIGN_OR_RETURN(SweepSpec spec, ParseSweepSpec(yaml, where));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec, options_.max_jobs));
  RETURN_IF_ERROR(DesignStatus(CheckDesign(spec, jobs), where, allow_unidentifiable));
  return store_->SubmitSweep(spec, jobs);
}

absl::StatusOr<std::string> Scheduler::RegisterWorker(const std::string& host, int64_t ranks,
                                                      const std::string& name,
                                                      const std::string& build) {
  if (host.empty()) return absl::InvalidArgumentError("RegisterWorker: host is empty");
  if (!build.empty()) {
    const nlohmann::json parsed = nlohmann::json::parse(build, nullptr, false);
    if (!parsed.is_object()) {
      return absl::InvalidArgumentError("RegisterWorker: build: not a JSON object");
    }
  }
  if (ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterWorker: ranks must be >= 1, got ", ranks));
  }
  // Unique across restarts: host, label, time and a process-wide counter, hashed.
  static const uint64_t salt = std::random_device{}();
  const std::string id = absl::StrCat(
      name.empty() ? host : name, "-",
      HexId(absl::StrCat(host, "/", name, "/", clock_->Now(), "/", salt, "/", ++worker_counter_))
          .substr(0, 8));
  RETURN_IF_ERROR(store_->UpsertWorker(id, host, ranks, clock_->Now(), build));
  std::lock_guard<std::mutex> lock(ranks_mu_);
  worker_ranks_[id] = ranks;
  return id;
}

absl::Status CheckLeaseTtl(double ttl, const std::string& flag) {
  if (ttl >= kMinLeaseTtlSeconds && ttl <= kMaxLeaseTtlSeconds) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", ttl, ": a lease lasts from ",
                                                 kMinLeaseTtlSeconds, " to ", kMaxLeaseTtlSeconds,
                                                 " seconds (groups heartbeat every third of it)"));
}

absl::StatusOr<LeaseOutcome> Scheduler::Lease(const std::string& worker_id,
                                              const std::string& request_id) {
  int64_t ranks = 0;
  {
    std::lock_guard<std::mutex> lock(ranks_mu_);
    auto it = worker_ranks_.find(worker_id);
    if (it != worker_ranks_.end()) ranks = it->second;
  }
  if (ranks == 0) {  // registered before a restart, or unknown
    ASSIGN_OR_RETURN(ranks, store_->WorkerRanks(worker_id));
    std::lock_guard<std::mutex> lock(ranks_mu_);
    worker_ranks_[worker_id] = ranks;
  }
  LeaseOutcome outcome;
  if (!draining_) {
    ASSIGN_OR_RETURN(outcome.grant, store_->LeaseNextJob(worker_id, ranks, clock_->Now(),
                                                         options_.lease_ttl_seconds, request_id));
  }
  if (!outcome.grant) {
    ASSIGN_OR_RETURN(int64_t active, store_->CountActiveJobs());
    // With no sweep submitted yet there is nothing to be done with: wait for one.
    ASSIGN_OR_RETURN(std::vector<StateCounts> sweeps, store_->CountStates(""));
    int64_t total = 0;
    for (const StateCounts& c : sweeps) total += c.total;
    outcome.done = active == 0 && total > 0;
  }
  return outcome;
}

absl::StatusOr<HeartbeatAction> Scheduler::Heartbeat(const std::string& worker_id,
                                                     const std::string& job_id, int64_t token,
                                                     int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Heartbeat: step must be >= 0, got ", step));
  }
  ASSIGN_OR_RETURN(JobState state, store_->RenewLease(job_id, worker_id, token, step, clock_->Now(),
                                                      options_.lease_ttl_seconds));
  HeardFromLeaseHolder(job_id);
  if (state == JobState::kCancelled) return HeartbeatAction::kCancel;
  return draining_ ? HeartbeatAction::kDrain : HeartbeatAction::kContinue;
}

absl::Status Scheduler::ReportMetrics(const std::string& job_id, int64_t token,
                                      const std::vector<ReportedMetric>& metrics) {
  if (metrics.empty()) return absl::InvalidArgumentError("ReportMetrics: empty batch");
  if (static_cast<int64_t>(metrics.size()) > options_.max_metrics_per_batch) {
    return absl::InvalidArgumentError(absl::StrCat("ReportMetrics: ", metrics.size(),
                                                   " points exceed the batch limit of ",
                                                   options_.max_metrics_per_batch));
  }
  std::vector<MetricPoint> points;
  points.reserve(metrics.size());
  for (const ReportedMetric& m : metrics) {
    if (m.name.empty()) return absl::InvalidArgumentError("ReportMetrics: a metric has no name");
    if (m.step < 0 || m.tokens < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReportMetrics: metric '", m.name, "' has a negative step or token count"));
    }
    if (!std::isfinite(m.value) || !std::isfinite(m.flops)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReportMetrics: metric '", m.name, "' at step ", m.step,
                       " is not finite; report a divergence with FailJob(DIVERGED)"));
    }
    points.push_back({job_id, m.name, m.step, m.value, m.tokens, m.flops, 0, 0.0});
  }
  RETURN_IF_ERROR(store_->AppendFencedMetrics(job_id, token, points, clock_->Now()));
  HeardFromLeaseHolder(job_id);
  return absl::OkStatus();
}

absl::Status Scheduler::ReportCheckpoint(const std::string& job_id, int64_t token, int64_t step,
                                         const std::string& path, const std::string& checksum) {
  if (step < 1) return absl::InvalidArgumentError("ReportCheckpoint: step must be >= 1");
  if (path.empty()) return absl::InvalidArgumentError("ReportCheckpoint: path is empty");
  RETURN_IF_ERROR(store_->RecordCheckpoint(job_id, token, step, path, checksum, clock_->Now()));
  HeardFromLeaseHolder(job_id);
  return absl::OkStatus();
}

absl::Status Scheduler::Complete(const std::string& job_id, int64_t token, int64_t step) {
  ASSIGN_OR_RETURN(JobState state, store_->EndAttempt(job_id, token, AttemptEnd::kSucceeded, step,
                                                      "succeeded", clock_->Now()));
  if (state == JobState::kSucceeded && options_.on_complete) options_.on_complete(job_id);
  return absl::OkStatus();
}

absl::StatusOr<JobState> Scheduler::Fail(const std::string& job_id, int64_t token, AttemptEnd end,
                                         const std::string& message, int64_t step) {
  if (end == AttemptEnd::kSucceeded) {
    return absl::InvalidArgumentError("FailJob: use CompleteJob for a finished job");
  }
  return store_->EndAttempt(job_id, token, end, step, message, clock_->Now());
}

absl::StatusOr<int64_t> Scheduler::GraceLeases() {
  double latest_expiry = 0;
  ASSIGN_OR_RETURN(LeaseTokens held, store_->HeldLeases(&latest_expiry));
  const double until = clock_->Now() + options_.lease_ttl_seconds;
  {
    std::lock_guard<std::mutex> lock(graced_mu_);
    graced_ = std::move(held);
    grace_until_ = std::max(until, latest_expiry);
    any_graced_ = !graced_.empty();
  }
  return store_->ExtendLeases(until);
}

absl::StatusOr<int64_t> Scheduler::ExpireLeases() {
  const double now = clock_->Now();
  if (!any_graced_) return store_->ExpireLeases(now);
  LeaseTokens graced;
  double until;
  {
    std::lock_guard<std::mutex> lock(graced_mu_);
    graced = graced_;
    until = grace_until_;
  }
  ASSIGN_OR_RETURN(int64_t expired, store_->ExpireLeases(now, graced));
  // Every graced lease runs out by `until` (the grace, or a longer lease it already
  // had) unless its group renewed it and was forgotten then: past it, this call
  // has ended the rest, and none is left to remember.
  if (now > until) {
    std::lock_guard<std::mutex> lock(graced_mu_);
    graced_.clear();
    any_graced_ = false;
  }
  return expired;
}

void Scheduler::HeardFromLeaseHolder(const std::string& job_id) {
  if (!any_graced_) return;
  std::lock_guard<std::mutex> lock(graced_mu_);
  graced_.erase(job_id);
  any_graced_ = !graced_.empty();
}

absl::StatusOr<std::vector<SweepSummary>> Scheduler::Status(const std::string& sweep,
                                                            std::vector<JobProgressRow>* jobs_out) {
  ASSIGN_OR_RETURN(std::vector<StateCounts> counts, store_->CountStates(sweep));
  std::vector<SweepSummary> out;
  for (StateCounts& sc : counts) {
    SweepSummary summary;
    ASSIGN_OR_RETURN(std::vector<JobProgressRow> jobs, store_->JobProgress(sc.sweep));
    summary.flops = SumProgress(jobs);
    if (jobs_out != nullptr && !sweep.empty()) *jobs_out = std::move(jobs);
    ASSIGN_OR_RETURN(summary.started_at, store_->SweepStartedAt(sc.sweep));
    summary.states = std::move(sc);
    out.push_back(std::move(summary));
  }
  return out;
}

absl::StatusOr<std::vector<JobProgressRow>> Scheduler::Jobs(const std::string& sweep) {
  return store_->JobProgress(sweep);
}

absl::StatusOr<int64_t> Scheduler::Resume(const std::string& sweep) {
  return store_->ResumeSweep(sweep);
}

absl::StatusOr<int64_t> Scheduler::Cancel(const std::string& sweep_or_job) {
  return store_->Cancel(sweep_or_job);
}

}  // namespace xmod
