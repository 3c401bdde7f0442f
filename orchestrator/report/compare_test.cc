#include "orchestrator/report/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "orchestrator/store/cells.h"

namespace xmod {
namespace {

using ::testing::ElementsAre;

JobResultRow Job(const std::string& id, int64_t context, double lr, int64_t seed, double loss,
                 const std::string& data = "xxh3:aa") {
  JobResultRow j;
  j.id = id;
  j.family = Family::kDense;
  j.scale = "s";
  j.state = JobState::kSucceeded;
  j.context = context;
  j.seed = seed;
  j.budget_kind = "tokens";
  j.budget_value = 1e6;
  j.final_val_loss = loss;
  j.final_val_loss_se = 0.01;
  j.config_key = nlohmann::json({{"family", "dense"},
                                 {"context", context},
                                 {"train", {{"lr", lr}, {"batch_tokens", 4096}}},
                                 {"data", {{"fingerprint", data}}}})
                     .dump();
  return j;
}

// A changes nothing but the learning rate against B: the lr is named as the
// difference, the contexts both sweeps ran are matched (128 only in A), and the
// differences come with seed SEs.
TEST(CompareSweeps, MatchesOnEverySettingButTheOnesThatDifferAsAWhole) {
  const std::vector<JobResultRow> a = {Job("a1", 64, 0.01, 0, 3.00), Job("a2", 64, 0.01, 1, 3.02),
                                       Job("a3", 256, 0.01, 0, 2.80), Job("a4", 256, 0.01, 1, 2.84),
                                       Job("a5", 128, 0.01, 0, 2.90)};
  std::vector<JobResultRow> b = {Job("b1", 64, 0.02, 0, 2.95), Job("b2", 64, 0.02, 1, 2.97),
                                 Job("b3", 256, 0.02, 0, 2.70), Job("b4", 256, 0.02, 1, 2.72)};
  JobResultRow failed = Job("b5", 512, 0.02, 0, 1.0);
  failed.state = JobState::kFailed;
  b.push_back(failed);
  const SweepComparison c = CompareSweeps(a, b);
  EXPECT_THAT(c.differences, ElementsAre("train.lr: 0.01 -> 0.02"));
  EXPECT_EQ(c.shared, 2);
  EXPECT_EQ(c.only_a, 1);
  EXPECT_EQ(c.only_b, 0);
  ASSERT_EQ(c.table.rows.size(), 2u);
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(c.table.columns.begin(), c.table.columns.end(), name) -
                               c.table.columns.begin());
  };
  // context 64: means 3.01 and 2.96, seed SEs 0.01 each.
  EXPECT_EQ(AsInt(c.table.rows[0][col("context")]), 64);
  EXPECT_NEAR(AsReal(c.table.rows[0][col("diff")]), -0.05, 1e-12);
  EXPECT_NEAR(AsReal(c.table.rows[0][col("diff_se")]), std::sqrt(2.0) * 0.01, 1e-12);
  EXPECT_EQ(AsText(c.table.rows[0][col("se_from")]), "seeds");
  EXPECT_NEAR(AsReal(c.table.rows[1][col("diff")]), -0.11, 1e-12);
  EXPECT_NEAR(c.mean_diff, -0.08, 1e-12);
  EXPECT_NEAR(c.mean_diff_se, 0.03, 1e-12);
  EXPECT_EQ(c.b_lower, 2);
}

// One seed a side: the SE is the two evaluation SEs; changed data is named.
TEST(CompareSweeps, SingleSeedsUseTheEvaluationErrorAndDataChangesAreNamed) {
  const SweepComparison c = CompareSweeps({Job("a", 64, 0.01, 0, 3.0, "xxh3:aa")},
                                          {Job("b", 64, 0.01, 0, 3.1, "xxh3:bb")});
  EXPECT_THAT(c.differences, ElementsAre("data.fingerprint: \"xxh3:aa\" -> \"xxh3:bb\""));
  ASSERT_EQ(c.table.rows.size(), 1u);
  EXPECT_EQ(AsText(c.table.rows[0].back()), "eval");
  EXPECT_NEAR(AsReal(c.table.rows[0][c.table.columns.size() - 3]), std::sqrt(2.0) * 0.01, 1e-12);
  EXPECT_EQ(c.mean_diff_se, 0.0);
}

}  // namespace
}  // namespace xmod
