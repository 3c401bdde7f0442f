#include "common/id.h"

#include <gtest/gtest.h>

namespace xmod {
namespace {

// Reference values of FNV-1a 64 from its specification's test vectors.
TEST(Id, Fnv1aMatchesPublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(Id, HexIdIsSixteenLowerCaseDigits) {
  EXPECT_EQ(HexId("a"), "af63dc4c8601ec8c");
  EXPECT_NE(HexId("{\"a\":1}"), HexId("{\"a\":2}"));
}

}  // namespace
}  // namespace xmod
