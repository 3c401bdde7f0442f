#include "orchestrator/rules/lease_rules.h"

#include <tuple>

#include "absl/strings/str_cat.h"

namespace xmod {

absl::StatusOr<AttemptVerdict> DecideAttemptEnd(JobState from, AttemptEnd end, int64_t failures,
                                                int64_t max_attempts) {
  AttemptVerdict v;
  v.failures = failures;
  switch (end) {
    case AttemptEnd::kSucceeded:
      v.to = JobState::kSucceeded;
      v.attempt_status = "succeeded";
      break;
    case AttemptEnd::kPreempted:
      v.to = JobState::kPending;
      v.attempt_status = "preempted";
      break;
    case AttemptEnd::kRetryableError:
      ++v.failures;
      v.to = v.failures >= max_attempts ? JobState::kFailed : JobState::kPending;
      v.attempt_status = "failed";
      break;
    case AttemptEnd::kFatalError:
      ++v.failures;
      v.to = JobState::kFailed;
      v.attempt_status = "failed";
      break;
    case AttemptEnd::kDiverged:
      ++v.failures;
      v.to = JobState::kFailed;
      v.attempt_status = "diverged";
      break;
  }
  v.via = (from == JobState::kLeased && v.to == JobState::kSucceeded) ? JobState::kRunning : from;
  const bool legal = IsHeld(from) && (v.via == from || IsLegalTransition(from, v.via)) &&
                     IsLegalTransition(v.via, v.to);
  if (!legal) {
    return absl::FailedPreconditionError(absl::StrCat("illegal transition ",
                                                      std::string(JobStateName(from)), " -> ",
                                                      std::string(JobStateName(v.to))));
  }
  return v;
}

bool IsHeld(JobState state) { return state == JobState::kLeased || state == JobState::kRunning; }

bool IsActive(JobState state) { return state == JobState::kPending || IsHeld(state); }

std::vector<JobState> StatesWhere(bool (*predicate)(JobState)) {
  std::vector<JobState> out;
  for (JobState s : kAllJobStates) {
    if (predicate(s)) out.push_back(s);
  }
  return out;
}

bool BatchSplitsOver(int64_t batch_tokens, int64_t context, int64_t group_ranks) {
  if (batch_tokens <= 0 || context <= 0 || group_ranks <= 0) return false;
  return (batch_tokens / context) % group_ranks == 0;
}

bool LeasesBefore(const LeaseKey& a, const LeaseKey& b) {
  return std::tie(b.priority, a.train_flops, a.job_id) <
         std::tie(a.priority, b.train_flops, b.job_id);
}

bool IsResumable(JobState state) {
  return state == JobState::kFailed || state == JobState::kCancelled;
}

bool IsCancellable(JobState state) { return IsActive(state); }

bool ResetsFailures(JobState to) { return to == JobState::kPending; }

bool ClosesAttempt(JobState from, JobState to) {
  return to == JobState::kCancelled && IsHeld(from);
}

}  // namespace xmod
