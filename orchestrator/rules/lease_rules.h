// The lease policy of the coordinator, as pure functions: what the end of an
// attempt means for its job, how retries count against max_attempts, which job a
// group leases first, which jobs fit a group, which states are "active" or
// "held", and what resume and cancel touch. The store (orchestrator/store) calls
// these inside its transactions and keeps only the SQL; the tables in
// lease_rules_test.cc pin every case. The state machine they move along is
// common/job_state.h, drawn once in docs/protocol.md.
//
// Torch-free, SQL-free, gRPC-free.
#ifndef XMOD_ORCHESTRATOR_RULES_LEASE_RULES_H_
#define XMOD_ORCHESTRATOR_RULES_LEASE_RULES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_state.h"

namespace xmod {

// How an attempt ended, as the worker group (or the lease clock) says.
enum class AttemptEnd {
  kSucceeded,
  kPreempted,       // back to pending; does not count toward max_attempts
  kRetryableError,  // counts; pending again while attempts remain, else failed
  kFatalError,      // counts; failed
  kDiverged,        // counts; failed
};

// What the store writes when an attempt ends.
struct AttemptVerdict {
  JobState to = JobState::kPending;   // the job's next state
  JobState via = JobState::kPending;  // the state passed through on the way (or `from`)
  int64_t failures = 0;               // the job's counted failures after this end
  std::string_view attempt_status;    // attempts.status: succeeded, preempted, failed, diverged
};

// The end of an attempt of a job in `from` (leased or running) that has counted
// `failures` of its `max_attempts`. A job that succeeds without ever
// heartbeating passes through running. FAILED_PRECONDITION when the state
// machine forbids the move (e.g. the job is not held).
absl::StatusOr<AttemptVerdict> DecideAttemptEnd(JobState from, AttemptEnd end, int64_t failures,
                                                int64_t max_attempts);

// A job is held by a worker group (has a live lease) in these states.
bool IsHeld(JobState state);
// Active: not finished, so a sweep with any active job is not done.
bool IsActive(JobState state);
// Every state for which `predicate` holds, in kAllJobStates order (the store turns
// it into an SQL IN list, so the rule has one home).
std::vector<JobState> StatesWhere(bool (*predicate)(JobState));

// A job's batch of batch_tokens / context sequences is split evenly over the
// group's ranks (data parallel, equal micro-batches), so only groups whose rank
// count divides the sequence count may lease it.
bool BatchSplitsOver(int64_t batch_tokens, int64_t context, int64_t group_ranks);

// What the lease order compares: higher priority first, then the order key (a
// FLOP figure: the job's training FLOPs, so the cheapest job first, unless the
// law-driven order of its sweep set one; docs/order.md), then the job id, so the
// order is total and the same on every coordinator.
struct LeaseKey {
  int64_t priority = 0;
  double train_flops = 0.0;
  std::string job_id;
  std::optional<double> order_key;  // unset: train_flops
  double Key() const { return order_key.value_or(train_flops); }
};
bool LeasesBefore(const LeaseKey& a, const LeaseKey& b);
// The same order as an SQL ORDER BY over the jobs table's columns (the
// jobs_by_status index has the same expression, schema/0008_adaptive_order.sql).
inline constexpr std::string_view kLeaseOrderSql =
    "priority DESC, COALESCE(order_key, train_flops), job_id";

// `xmod resume`: the states it moves back to pending (with a fresh attempt budget).
bool IsResumable(JobState state);
// `xmod cancel`: the states it moves to cancelled.
bool IsCancellable(JobState state);
// A job moved to `to` by resume or cancel: whether its counted failures start over
// (pending again with a fresh budget), and whether its open attempt is closed and
// its lease released (it was held).
bool ResetsFailures(JobState to);
bool ClosesAttempt(JobState from, JobState to);

// The steps of one attempt, as the store knows them when a report arrives.
struct AttemptSteps {
  int64_t steps = 0;            // the job's step count
  int64_t resumed_from = 0;     // the checkpoint step the attempt started from (0: fresh)
  int64_t last_reported = 0;    // the highest step a heartbeat reported (>= resumed_from)
  int64_t last_checkpoint = 0;  // the highest checkpoint step this attempt recorded (0: none)
};

// What a report's step may be, by the kind of report. Steps never go back within
// an attempt, and never beyond the job's steps:
enum class StepReport {
  kHeartbeat,   // last_reported ..= steps
  kMetric,      // resumed_from < step ..= steps: a row of this attempt's own work
  kCheckpoint,  // max(resumed_from + 1, last_checkpoint) ..= steps (a re-send is the same step)
  kComplete,    // exactly steps: a job succeeds only at its last step
  kFailure,     // max(resumed_from, last_reported) ..= steps: an end never goes back
};

// INVALID_ARGUMENT naming `rpc`, the step and the bound it breaks; OK otherwise.
absl::Status CheckReportedStep(std::string_view rpc, StepReport kind, int64_t step,
                               const AttemptSteps& attempt);

// A checkpoint path as a worker reports it (RUN_DIR/JOB_ID/checkpoints/step_NNNNNNNN):
// it must end in the folder of this job and step, and have no ".." component, so
// what the coordinator stores and hands to the next lease names this job's own
// checkpoint and nothing outside its run folder. INVALID_ARGUMENT otherwise.
absl::Status CheckCheckpointPath(std::string_view job_id, int64_t step, std::string_view path);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_RULES_LEASE_RULES_H_
