#include "common/version/build_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace xmod {
namespace {

TEST(BuildInfo, NamesTheVersionTheCommitTheBuildTypeAndTheCompiler) {
  const BuildInfo& b = ThisBuild();
  EXPECT_THAT(b.version, testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  // Built from this git checkout: 12 hex digits, "-dirty" when it had changes.
  EXPECT_THAT(b.commit, testing::MatchesRegex("[0-9a-f]{12}(-dirty)?|unknown"));
  EXPECT_FALSE(b.build_type.empty());
  EXPECT_THAT(b.compiler, testing::MatchesRegex("(GCC|Clang) .+"));
  EXPECT_EQ(VersionLine("xmod"), "xmod " + b.version + " (commit " + b.commit + ", " +
                                     b.build_type + ", " + b.compiler + ")");
  EXPECT_EQ(BuildJson(b)["commit"], b.commit);
}

}  // namespace
}  // namespace xmod
