#include "orchestrator/sweep/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fixtures.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

class MalformedSpec : public ::testing::TestWithParam<std::string> {};

// Every fixture under tests/fixtures/bad is rejected with its file:line: field: message.
TEST_P(MalformedSpec, IsRejectedNamingFileLineAndField) {
  const std::string path = testing::FixturePath("bad/" + GetParam() + ".yaml");
  const std::string expected = testing::ExpectedError(path);
  ASSERT_FALSE(expected.empty()) << path << " has no '# expect:' line";
  auto spec = LoadSweepSpec(path);
  ASSERT_FALSE(spec.ok()) << path << " was accepted";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(path + ":" + expected));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MalformedSpec, ::testing::ValuesIn(testing::BadSpecNames()),
                         [](const auto& info) { return info.param; });

TEST(SweepSpec, AllProblemsOfAFileAreReportedTogether) {
  const std::string text = R"(name: two
data: {synthetic: true}
scales:
  a: {d_model: 30, n_heads: 4, n_layers: 2}
grid: {sparsity: [1.5], stride: [0], context: [16]}
budget: {tokens: 100}
train: {batch_tokens: 64}
)";
  auto spec = ParseSweepSpec(text, "two.yaml");
  ASSERT_FALSE(spec.ok());
  const std::string message(spec.status().message());
  EXPECT_THAT(message, HasSubstr("two.yaml:4: scales.a.n_heads: d_model 30 is not divisible"));
  EXPECT_THAT(message, HasSubstr("two.yaml:5: grid.sparsity[0]: sparsity must be in [0, 1)"));
  EXPECT_THAT(message, HasSubstr("two.yaml:5: grid.stride[0]: stride must be at least 1"));
}

TEST(SweepSpec, ExampleSweepsParse) {
  for (const char* name : {"smoke", "demo", "xmod-cluster"}) {
    auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/sweeps/" + name + ".yaml");
    EXPECT_TRUE(spec.ok()) << name << ": " << spec.status();
  }
}

TEST(SweepSpec, DefaultsApplyWhereTheFileIsSilent) {
  auto spec = ParseSweepSpec(R"(name: d
data: {path: data/brown}
family: dense
scales: {s: {d_model: 64, n_heads: 4, n_layers: 2}}
grid: {context: [32, 64]}
budget: {tokens_per_param: [10, 20]}
train: {batch_tokens: 2048}
)",
                             "d.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.vocab_size, 256);
  EXPECT_EQ(spec->grid_scales, std::vector<std::string>{"s"});  // every scale
  EXPECT_EQ(spec->scales[0].d_ff, DefaultDff(64));
  EXPECT_EQ(spec->match, MatchMode::kFlops);
  EXPECT_EQ(spec->budget_values, (std::vector<double>{10, 20}));
  EXPECT_DOUBLE_EQ(spec->train.lr, 3e-3);
  EXPECT_EQ(spec->resources.max_attempts, 3);
}

}  // namespace
}  // namespace xmod
