#include "common/job_state.h"

#include "absl/strings/str_cat.h"

namespace xmod {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "pending";
    case JobState::kLeased:
      return "leased";
    case JobState::kRunning:
      return "running";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<JobState> ParseJobState(std::string_view name) {
  for (JobState s : kAllJobStates) {
    if (JobStateName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job state '", std::string(name), "'"));
}

bool IsLegalTransition(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kPending:
      return to == S::kLeased || to == S::kCancelled;
    case S::kLeased:
      return to == S::kRunning || to == S::kPending || to == S::kFailed || to == S::kCancelled;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kPending || to == S::kFailed || to == S::kCancelled;
    case S::kFailed:
    case S::kCancelled:
      return to == S::kPending;
    case S::kSucceeded:
      return false;
  }
  return false;
}

}  // namespace xmod
