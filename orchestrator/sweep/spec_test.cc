#include "orchestrator/sweep/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "tests/fixtures.h"
#include "tests/paths/paths.h"

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
  for (const char* name : {"smoke", "demo", "xmod-cluster", "mol"}) {
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

// A valid dense sweep whose line 3 is `line3` (a whole section) and whose other
// sections are `others` where given, else small defaults.
std::string SweepWithLine3(const std::string& line3, std::map<std::string, std::string> others) {
  const std::pair<const char*, const char*> defaults[] = {
      {"data", "{synthetic: true, vocab_size: 64}"},
      {"scales", "{s: {d_model: 32, n_heads: 2, n_layers: 4}}"},
      {"grid", "{context: [32]}"},
      {"budget", "{tokens: 8192}"},
      {"train", "{batch_tokens: 1024}"},
      {"design", "{laws: []}"}};
  const std::string section = line3.substr(0, line3.find(':'));
  std::string text = "name: b\nfamily: " + (others.count("family") ? others["family"] : "dense") +
                     "\n" + line3 + "\n";
  for (const auto& [key, value] : defaults) {
    if (key == section) continue;
    text += std::string(key) + ": " + (others.count(key) ? others[key] : value) + "\n";
  }
  return text;
}

// Every bound a sweep's integers are held to: the limit itself is accepted, one
// past it is refused on the line of the field, naming it. Between them they keep
// every count expansion computes exact (common/accounting.h, sweeps/README.md).
TEST(SweepSpec, EachSizeIsAcceptedAtItsBoundAndRefusedOnePastIt) {
  struct Case {
    std::string field;
    std::string line3;  // with % where the value goes
    std::string at, past;
    std::map<std::string, std::string> others;
  };
  const std::string count = "9007199254740992", count_past = "9007199254740993";
  std::vector<Case> cases = {
      {"data.vocab_size", "data: {path: d, vocab_size: %}", "4294967296", "4294967297", {}},
      {"scales.s.d_model",
       "scales: {s: {d_model: %, n_heads: 2, n_layers: 1, d_ff: 16}}",
       "1048576",
       "1048577",
       {}},
      {"scales.s.n_layers",
       "scales: {s: {d_model: 32, n_heads: 2, n_layers: %}}",
       "100000",
       "100001",
       {}},
      {"scales.s.d_ff",
       "scales: {s: {d_model: 32, n_heads: 2, n_layers: 1, d_ff: %}}",
       "4194304",
       "4194305",
       {}},
      {"scales.s.train.batch_tokens",
       "scales: {s: {d_model: 32, n_heads: 2, n_layers: 1, train: {batch_tokens: %}}}",
       "1099511627776",
       "1099511627777",
       {{"grid", "{context: [1]}"}}},
      {"grid.context",
       "grid: {context: %}",
       "16777216",
       "16777217",
       {{"train", "{batch_tokens: 16777216}"}}},
      {"grid.stride",
       "grid: {sparsity: 0.5, context: 32, stride: %}",
       "100000",
       "100001",
       {{"family", "xmod"}}},
      {"grid.top_k",
       "grid: {sparsity: 0, context: 32, top_k: %}",
       "1048576",
       "1048577",
       {{"family", "moe"}, {"scales", "{s: {d_model: 32, n_heads: 2, n_layers: 1, d_ff: 16}}"}}},
      {"budget.tokens", "budget: {tokens: %}", count, "9007199254740994", {}},
      {"budget.tokens_per_param", "budget: {tokens_per_param: %}", count, "9007199254740994", {}},
      {"train.batch_tokens",
       "train: {batch_tokens: %}",
       "1099511627776",
       "1099511627777",
       {{"grid", "{context: [1]}"}}},
      {"train.micro_batch_tokens",
       "train: {batch_tokens: 1024, micro_batch_tokens: %}",
       "1099511627776",
       "1099511627777",
       {}},
      {"resources.ranks",
       "resources: {ranks: %}",
       "1048576",
       "1048577",
       {{"grid", "{context: [1]}"}, {"train", "{batch_tokens: 1048576}"}}},
      {"resources.priority", "resources: {priority: %}", "1000000000", "1000000001", {}},
      {"resources.priority", "resources: {priority: %}", "-1000000000", "-1000000001", {}},
      {"moe.top_k", "moe: {top_k: %}", "1048576", "1048577", {}},
      {"moe.shared_experts", "moe: {shared_experts: %}", "1048576", "1048577", {}},
      {"moe.granularity", "moe: {granularity: %}", "4194304", "4194305", {}},
      {"deco.expert_width", "deco: {expert_width: %}", "4194304", "4194305", {}},
      {"deco.shared_width", "deco: {shared_width: %}", "4194304", "4194305", {}},
      {"deco.dense_layers", "deco: {dense_layers: %}", "100000", "100001", {}},
  };
  for (const char* key : {"warmup_steps", "eval_interval", "eval_tokens", "final_eval_tokens",
                          "checkpoint_interval", "log_interval", "min_warmup_steps"}) {
    cases.push_back({absl::StrCat("train.", key),
                     absl::StrCat("train: {batch_tokens: 1024, ", key, ": %}"),
                     count,
                     count_past,
                     {}});
  }
  for (const Case& c : cases) {
    const auto text = [&](const std::string& value) {
      std::string line3 = c.line3;
      line3.replace(line3.find('%'), 1, value);
      return SweepWithLine3(line3, c.others);
    };
    auto at = ParseSweepSpec(text(c.at), "b.yaml");
    EXPECT_TRUE(at.ok()) << c.field << " at its bound: " << at.status() << "\n" << text(c.at);
    auto past = ParseSweepSpec(text(c.past), "b.yaml");
    ASSERT_FALSE(past.ok()) << c.field << " past its bound was accepted:\n" << text(c.past);
    EXPECT_THAT(std::string(past.status().message()),
                HasSubstr("b.yaml:3: " + c.field + ": must be at "))
        << text(c.past);
  }
}

// A sweep's -0.0 is read as 0.0, so it resolves to the job 0.0 gives.
TEST(SweepSpec, NegativeZeroIsReadAsZero) {
  const std::string text = R"(name: z
data: {synthetic: true}
family: dense
scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}
grid: {context: [32]}
budget: {tokens: 8192}
train: {batch_tokens: 1024, weight_decay: -0.0, min_lr_ratio: -0.0}
)";
  auto spec = ParseSweepSpec(text, "z.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(std::signbit(spec->train.weight_decay));
  EXPECT_FALSE(std::signbit(spec->train.min_lr_ratio));
}

// Expansion refuses values the parser cannot judge alone (a budget's tokens, a
// FLOP-matched depth) at the value's own line: the spec keeps every line.
TEST(SweepSpec, TheLineOfEveryValueIsKeptForExpansionsMessages) {
  const std::string text = R"(name: l
data: {synthetic: true}
family: xmod
scales:
  s:
    d_model: 32
    n_heads: 2
    n_layers: 2
grid:
  - sparsity:
      - 0.5
      - 0.75
    stride: 2
    context: [32]
    budget:
      flops: [1e12, 2e12]
)";
  auto spec = ParseSweepSpec(text + "train: {batch_tokens: 1024}\n", "l.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->LineOf("scales.s.n_layers", 0), 8);
  EXPECT_EQ(spec->AxisValueAt("grid[0].sparsity", 1, 0),
            std::make_pair(std::string("grid[0].sparsity[1]"), 12));
  EXPECT_EQ(spec->AxisValueAt("grid[0].stride", 0, 0),
            std::make_pair(std::string("grid[0].stride"), 13));
  EXPECT_EQ(spec->AxisValueAt("grid[0].budget.flops", 1, 0),
            std::make_pair(std::string("grid[0].budget.flops[1]"), 16));
  ASSERT_EQ(spec->blocks.size(), 1u);
  EXPECT_EQ(spec->blocks[0].field, "grid[0]");
  EXPECT_EQ(spec->blocks[0].budget_field, "grid[0].budget");
  EXPECT_EQ(spec->LineOf("grid[0].seed", -1), -1);
}

}  // namespace
}  // namespace xmod
