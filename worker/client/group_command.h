// What rank 0 tells the other ranks of its group, in one broadcast per job: a
// fixed 16-byte header (magic, kind, resume step) followed by the job file's JSON
// text exactly as the coordinator sent it. Every rank parses that text with the
// same reader (common/job_file.h).
#ifndef XMOD_WORKER_CLIENT_GROUP_COMMAND_H_
#define XMOD_WORKER_CLIENT_GROUP_COMMAND_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace xmod {

struct GroupCommand {
  enum class Kind : uint8_t { kExit = 1, kTrain = 2 };
  Kind kind = Kind::kExit;
  int64_t resume_step = 0;  // kTrain: the checkpoint step to start from (0: fresh)
  std::string job_json;     // kTrain: the job file
};

std::string EncodeGroupCommand(const GroupCommand& command);
// INVALID_ARGUMENT for bytes that are not a command (short, wrong magic, unknown kind).
absl::StatusOr<GroupCommand> DecodeGroupCommand(std::string_view bytes);

}  // namespace xmod

#endif  // XMOD_WORKER_CLIENT_GROUP_COMMAND_H_
