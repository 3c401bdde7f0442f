// Local slopes (slopes.h) on losses of a known power law: along D at each scale,
// along N at each budget, with what the budget holds fixed, and seed intervals.
#include "orchestrator/report/slopes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <variant>

namespace xmod {
namespace {

// L = 3 · N^−0.1 · D^−0.2 · (1 + wobble per seed), a dense run.
JobResultRow PowerLawRun(const std::string& scale, double n, const std::string& kind, double value,
                         int64_t seed, double wobble_per_x) {
  JobResultRow j;
  j.id = scale + kind + std::to_string(value) + "/" + std::to_string(seed);
  j.family = Family::kDense;
  j.scale = scale;
  j.state = JobState::kSucceeded;
  j.budget_kind = kind;
  j.budget_value = value;
  j.context = 64;
  j.n_active = n;
  j.seed = seed;
  const double d = kind == "tokens_per_param" ? value * n : value;
  j.tokens = j.tokens_trained = static_cast<int64_t>(d);
  // A seed's own offset (the same at every point) cancels in a slope; the
  // wobble does not, so the seeds disagree a little.
  j.final_val_loss = 3.0 * std::pow(n, -0.1) * std::pow(d, -0.2) * (1.0 + 0.01 * seed) *
                     (1.0 + wobble_per_x * (seed % 2 == 0 ? 1 : -1) * std::log(d));
  return j;
}

double Number(const Value& v) { return std::get<double>(v); }

TEST(LocalSlopes, AlongDAtEachScaleAndAlongNAtEachBudget) {
  std::vector<JobResultRow> jobs;
  for (int64_t seed : {1, 2, 3}) {
    for (double ratio : {20.0, 80.0}) {
      jobs.push_back(PowerLawRun("s", 1e5, "tokens_per_param", ratio, seed, 0.0));
      jobs.push_back(PowerLawRun("m", 4e5, "tokens_per_param", ratio, seed, 0.0));
    }
  }
  const QueryResult t = LocalSlopes(jobs);
  ASSERT_EQ(t.columns.size(), 10u);
  // Two scales along D, two budgets along N.
  ASSERT_EQ(t.rows.size(), 4u);
  int along_d = 0, along_n = 0;
  for (const auto& row : t.rows) {
    EXPECT_EQ(std::get<std::string>(row[0]), "dense");
    EXPECT_EQ(std::get<int64_t>(row[9]), 3);
    if (std::get<std::string>(row[2]) == "D") {
      ++along_d;
      EXPECT_NEAR(Number(row[6]), -0.2, 1e-9);
    } else {
      ++along_n;
      // D/N held: D grows with N, so the slope is −0.1 − 0.2.
      EXPECT_NEAR(Number(row[6]), -0.3, 1e-9);
      EXPECT_EQ(std::get<std::string>(row[3]).rfind("D/N = ", 0), 0u);
    }
    EXPECT_NEAR(Number(row[7]), Number(row[6]), 1e-9);  // identical seeds: no width
  }
  EXPECT_EQ(along_d, 2);
  EXPECT_EQ(along_n, 2);
}

TEST(LocalSlopes, SeedsThatDisagreeGiveAnIntervalAroundTheMean) {
  std::vector<JobResultRow> jobs;
  for (int64_t seed : {1, 2, 3, 4}) {
    for (double d : {1e7, 4e7}) jobs.push_back(PowerLawRun("s", 1e5, "tokens", d, seed, 0.002));
  }
  jobs.push_back(PowerLawRun("m", 4e5, "tokens", 1e7, 1, 0.002));  // one seed along N
  jobs.push_back(PowerLawRun("m", 4e5, "tokens", 4e7, 9, 0.002));  // no seed shared along N at 4e7
  const QueryResult t = LocalSlopes(jobs);
  bool saw_d = false, saw_n = false;
  for (const auto& row : t.rows) {
    if (std::get<std::string>(row[2]) == "D") {
      saw_d = true;
      EXPECT_EQ(std::get<int64_t>(row[9]), 4);
      EXPECT_LT(Number(row[7]), -0.2);
      EXPECT_GT(Number(row[8]), -0.2);
      EXPECT_LT(Number(row[8]) - Number(row[7]), 0.05);
    } else {
      saw_n = true;
      EXPECT_EQ(std::get<std::string>(row[3]), "D = 1e+07");
      EXPECT_NEAR(Number(row[6]), -0.1, 1e-3);  // D held: the N exponent alone
      EXPECT_EQ(std::get<int64_t>(row[9]), 1);
      EXPECT_TRUE(std::holds_alternative<std::monostate>(row[7]));  // one seed: no interval
    }
  }
  EXPECT_TRUE(saw_d);
  EXPECT_TRUE(saw_n);
  EXPECT_EQ(t.rows.size(), 2u);  // the pair at 4e7 shares no seed
}

}  // namespace
}  // namespace xmod
