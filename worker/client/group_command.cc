#include "worker/client/group_command.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace xmod {

namespace {

constexpr char kMagic[4] = {'X', 'G', 'C', '1'};
constexpr size_t kHeader = 16;  // magic 4, kind 1, padding 3, resume step 8

}  // namespace

std::string EncodeGroupCommand(const GroupCommand& command) {
  std::string bytes(kHeader, '\0');
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  bytes[4] = static_cast<char>(command.kind);
  // Every rank of a group runs the same binary on the same architecture: the
  // step is copied in the host's byte order.
  std::memcpy(bytes.data() + 8, &command.resume_step, sizeof(int64_t));
  if (command.kind == GroupCommand::Kind::kTrain) bytes += command.job_json;
  return bytes;
}

absl::StatusOr<GroupCommand> DecodeGroupCommand(std::string_view bytes) {
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group command: ", bytes.size(), " bytes without the command header"));
  }
  GroupCommand command;
  const auto kind = static_cast<uint8_t>(bytes[4]);
  if (kind != static_cast<uint8_t>(GroupCommand::Kind::kExit) &&
      kind != static_cast<uint8_t>(GroupCommand::Kind::kTrain)) {
    return absl::InvalidArgumentError(absl::StrCat("group command: unknown kind ", kind));
  }
  command.kind = static_cast<GroupCommand::Kind>(kind);
  std::memcpy(&command.resume_step, bytes.data() + 8, sizeof(int64_t));
  if (command.kind == GroupCommand::Kind::kTrain) command.job_json = bytes.substr(kHeader);
  return command;
}

}  // namespace xmod
