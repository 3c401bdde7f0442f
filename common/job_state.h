// The job state machine (docs/protocol.md, the one drawing of it), shared by the store (which
// enforces it) and by anything that prints or parses a job's status. Torch-free.
#ifndef XMOD_COMMON_JOB_STATE_H_
#define XMOD_COMMON_JOB_STATE_H_

#include <array>
#include <string_view>

#include "absl/status/statusor.h"

namespace xmod {

enum class JobState { kPending, kLeased, kRunning, kSucceeded, kFailed, kCancelled };

inline constexpr std::array<JobState, 6> kAllJobStates = {JobState::kPending, JobState::kLeased,
                                                          JobState::kRunning, JobState::kSucceeded,
                                                          JobState::kFailed,  JobState::kCancelled};

// Lower-case name as stored in the database ("pending", "leased", ...).
std::string_view JobStateName(JobState state);

// Inverse of JobStateName; INVALID_ARGUMENT for an unknown name.
absl::StatusOr<JobState> ParseJobState(std::string_view name);

// True when `from -> to` is one of the transitions of the state machine in
// docs/protocol.md (the one drawing of it; succeeded is terminal).
bool IsLegalTransition(JobState from, JobState to);

// True for states in which no worker holds the job and none will without a resume.
inline bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

}  // namespace xmod

#endif  // XMOD_COMMON_JOB_STATE_H_
