#include "worker/client/group_command.h"

#include <gtest/gtest.h>

namespace xmod {
namespace {

TEST(GroupCommand, TrainAndExitRoundTrip) {
  const std::string job = R"({"id":"abc","steps":3})";
  auto train = DecodeGroupCommand(EncodeGroupCommand({GroupCommand::Kind::kTrain, 1234, job}));
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->kind, GroupCommand::Kind::kTrain);
  EXPECT_EQ(train->resume_step, 1234);
  EXPECT_EQ(train->job_json, job);  // the coordinator's bytes, not re-encoded
  auto exit = DecodeGroupCommand(EncodeGroupCommand({GroupCommand::Kind::kExit, 0, job}));
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->kind, GroupCommand::Kind::kExit);
  EXPECT_TRUE(exit->job_json.empty());
}

TEST(GroupCommand, BytesThatAreNotACommandAreRefused) {
  std::string good = EncodeGroupCommand({GroupCommand::Kind::kTrain, 7, "{}"});
  for (size_t n = 0; n < 16; ++n) {
    EXPECT_FALSE(DecodeGroupCommand(good.substr(0, n)).ok()) << n;
  }
  std::string wrong_magic = good;
  wrong_magic[0] = 'Y';
  EXPECT_FALSE(DecodeGroupCommand(wrong_magic).ok());
  std::string wrong_kind = good;
  wrong_kind[4] = 9;
  EXPECT_FALSE(DecodeGroupCommand(wrong_kind).ok());
  EXPECT_FALSE(DecodeGroupCommand(R"({"cmd":"exit"})").ok());  // the old JSON command
}

}  // namespace
}  // namespace xmod
