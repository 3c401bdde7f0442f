#include "orchestrator/rules/lease_rules.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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
  const double ka = a.Key(), kb = b.Key();
  return std::tie(b.priority, ka, a.job_id) < std::tie(a.priority, kb, b.job_id);
}

bool IsResumable(JobState state) {
  return state == JobState::kFailed || state == JobState::kCancelled;
}

bool IsCancellable(JobState state) { return IsActive(state); }

bool ResetsFailures(JobState to) { return to == JobState::kPending; }

bool ClosesAttempt(JobState from, JobState to) {
  return to == JobState::kCancelled && IsHeld(from);
}

absl::Status CheckReportedStep(std::string_view rpc, StepReport kind, int64_t step,
                               const AttemptSteps& attempt) {
  if (kind == StepReport::kComplete) {
    if (step == attempt.steps) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(rpc), ": the job has ", attempt.steps,
                     " steps; it can only complete at step ", attempt.steps, ", not ", step));
  }
  int64_t low = 0;
  switch (kind) {
    case StepReport::kHeartbeat:
      low = attempt.last_reported;
      break;
    case StepReport::kMetric:
      low = attempt.resumed_from + 1;
      break;
    case StepReport::kCheckpoint:
      low = std::max(attempt.resumed_from + 1, attempt.last_checkpoint);
      break;
    case StepReport::kFailure:
      // An attempt ends where its work stands, never below what it told us.
      low = std::max(attempt.resumed_from, attempt.last_reported);
      break;
    case StepReport::kComplete:
      low = attempt.resumed_from;
      break;
  }
  if (step >= low && step <= attempt.steps) return absl::OkStatus();  // the hot path: no strings
  std::string why;
  switch (kind) {
    case StepReport::kHeartbeat:
      why = absl::StrCat("steps do not go back: the last heartbeat said ", low);
      break;
    case StepReport::kMetric:
      why = absl::StrCat("a row of this attempt, which resumed from step ", attempt.resumed_from);
      break;
    case StepReport::kCheckpoint:
      why = absl::StrCat("new work of this attempt, which resumed from step ", attempt.resumed_from,
                         " and last checkpointed at ", attempt.last_checkpoint);
      break;
    case StepReport::kFailure:
      why = absl::StrCat("steps do not go back: this attempt resumed from step ",
                         attempt.resumed_from, " and its last heartbeat said ",
                         attempt.last_reported);
      break;
    case StepReport::kComplete:
      why = absl::StrCat("this attempt resumed from step ", attempt.resumed_from);
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(rpc), ": step ", step, " is outside ",
                                                 low, "..", attempt.steps, " (", why, ")"));
}

absl::Status CheckCheckpointPath(std::string_view job_id, int64_t step, std::string_view path) {
  const std::string text(path);
  for (absl::string_view part : absl::StrSplit(text, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("ReportCheckpoint: path '", text, "' has a '..' component"));
    }
  }
  char folder[48];
  std::snprintf(folder, sizeof(folder), "/checkpoints/step_%08lld", static_cast<long long>(step));
  const std::string tail = absl::StrCat(std::string(job_id), folder);
  const bool ends = text.size() >= tail.size() &&
                    text.compare(text.size() - tail.size(), tail.size(), tail) == 0 &&
                    (text.size() == tail.size() || text[text.size() - tail.size() - 1] == '/');
  if (!ends) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReportCheckpoint: path '", text, "' is not the checkpoint folder of job ",
                     std::string(job_id), " at step ", step, " (expected RUN_DIR/", tail, ")"));
  }
  return absl::OkStatus();
}

}  // namespace xmod
