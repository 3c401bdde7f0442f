// The lr scan's selection (report.h BestLrRuns, LrScanTable) and the paired
// differences (PairedDifferences) on runs whose losses are known: each family is
// read at its own best factor at each scale when its scan covered every scale,
// else at the sweep's lr everywhere; configurations without a finished run at the
// best factor fall back to the sweep's lr; and a pair's interval comes from the
// pooled seed sd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "orchestrator/report/report.h"

namespace xmod {
namespace {

// A finished run; `factor` 0 means no lr_factor field (the sweep's own lr).
JobResultRow Finished(Family family, const std::string& scale, double sparsity, double factor,
                      int64_t seed, double loss) {
  JobResultRow j;
  nlohmann::json config = {{"family", std::string(FamilyName(family))},
                           {"sparsity", sparsity},
                           {"lr", 1e-3 * (factor > 0 ? factor : 1.0)},
                           {"min_lr", 1e-4 * (factor > 0 ? factor : 1.0)}};
  if (factor > 0) config["lr_factor"] = factor;
  j.config_key = j.cluster_key = config.dump();
  j.id = j.config_key + "/" + scale + "/" + std::to_string(seed);
  j.family = family;
  j.scale = scale;
  j.state = JobState::kSucceeded;
  j.budget_kind = "tokens_per_param";
  j.budget_value = 20;
  j.context = 64;
  j.seed = seed;
  j.sparsity = sparsity;
  j.capacity = 1.0 - sparsity;
  j.stride = family == Family::kDense ? 1 : 2;
  j.n_active = scale == "s" ? 1e5 : 4e5;
  j.n_total = j.n_active;
  j.train_flops = 1e12;
  if (family == Family::kXmod) {
    j.final_val_loss_causal = loss;
    j.final_capacity_causal = j.capacity;
  }
  j.final_val_loss = loss;
  return j;
}

std::set<std::string> Ids(const std::vector<JobResultRow>& jobs) {
  std::set<std::string> ids;
  for (const JobResultRow& j : jobs) ids.insert(j.id);
  return ids;
}

// Scale s scanned: dense is best at factor 2, X-MoD at factor 0.5 (for both of its
// sparsities); one X-MoD sparsity (0.75) ran only the sweep's lr. With `unscanned`,
// scale m ran at the sweep's lr only.
std::vector<JobResultRow> ScannedRuns(bool unscanned) {
  std::vector<JobResultRow> jobs;
  for (int64_t seed : {1, 2}) {
    jobs.push_back(Finished(Family::kDense, "s", 0, 0.5, seed, 3.30));
    jobs.push_back(Finished(Family::kDense, "s", 0, 0, seed, 3.20));
    jobs.push_back(Finished(Family::kDense, "s", 0, 2, seed, 3.10));
    for (double sparsity : {0.25, 0.5}) {
      jobs.push_back(Finished(Family::kXmod, "s", sparsity, 0.5, seed, 3.00 + sparsity));
      jobs.push_back(Finished(Family::kXmod, "s", sparsity, 0, seed, 3.15 + sparsity));
      jobs.push_back(Finished(Family::kXmod, "s", sparsity, 2, seed, 3.40 + sparsity));
    }
    jobs.push_back(Finished(Family::kXmod, "s", 0.75, 0, seed, 3.5));
    if (!unscanned) continue;
    jobs.push_back(Finished(Family::kDense, "m", 0, 0, seed, 2.9));
    jobs.push_back(Finished(Family::kXmod, "m", 0.5, 0, seed, 2.8));
  }
  return jobs;
}

TEST(LrScan, EachFamilyIsReadAtItsBestFactorWhenItsScanCoversEveryScale) {
  const std::vector<JobResultRow> jobs = ScannedRuns(false);
  std::vector<LrScanChoice> choices;
  const std::vector<JobResultRow> kept = BestLrRuns(jobs, &choices);
  ASSERT_EQ(choices.size(), 2u);
  for (const LrScanChoice& c : choices) {
    EXPECT_EQ(c.scale, "s");
    EXPECT_TRUE(c.complete);
    EXPECT_TRUE(c.applied);
    EXPECT_EQ(c.mean_loss.size(), 3u);
    EXPECT_DOUBLE_EQ(c.factor, c.family == "dense" ? 2.0 : 0.5) << c.family;
    EXPECT_EQ(c.configurations, c.family == "dense" ? 1 : 2);
  }
  std::set<std::string> expected;
  for (int64_t seed : {1, 2}) {
    expected.insert(Finished(Family::kDense, "s", 0, 2, seed, 0).id);
    for (double sparsity : {0.25, 0.5})
      expected.insert(Finished(Family::kXmod, "s", sparsity, 0.5, seed, 0).id);
    expected.insert(
        Finished(Family::kXmod, "s", 0.75, 0, seed, 0).id);  // no run at 0.5: its own lr
  }
  EXPECT_EQ(Ids(kept), expected);
  // The laws' points follow the selection.
  PointOptions o;
  o.law = "xmod";
  EXPECT_EQ(FitPoints(jobs).size(), FitPoints(kept).size());
  EXPECT_EQ(Ids(BestLrRuns(kept)), Ids(kept));  // the selection is idempotent
  EXPECT_EQ(FitPoints(jobs, o).size(), kept.size());
  // The table marks the choice.
  const QueryResult t = LrScanTable(jobs);
  ASSERT_EQ(t.rows.size(), 6u);
  int best = 0;
  for (const auto& row : t.rows) best += std::get<std::string>(row[5]) == "best (read)";
  EXPECT_EQ(best, 2);
  // Without a scan nothing changes.
  std::vector<JobResultRow> plain;
  for (const JobResultRow& j : jobs) {
    if (j.config_key.find("lr_factor") == std::string::npos) plain.push_back(j);
  }
  EXPECT_EQ(Ids(BestLrRuns(plain)), Ids(plain));
}

// A scan of the smallest scale only, with a larger scale at the rule's lr: reading
// the tuned lr at one and the rule at the other would leave a loss penalty at the
// larger scales only and bias the exponents (docs/laws.md), so every scale is read
// at the sweep's own lr.
TEST(LrScan, AScanThatMissesAScaleLeavesEveryScaleAtTheSweepsOwnLr) {
  const std::vector<JobResultRow> jobs = ScannedRuns(true);
  std::vector<LrScanChoice> choices;
  const std::vector<JobResultRow> kept = BestLrRuns(jobs, &choices);
  ASSERT_EQ(choices.size(), 2u);
  for (const LrScanChoice& c : choices) {
    EXPECT_TRUE(c.complete);
    EXPECT_FALSE(c.applied) << c.family;
    EXPECT_EQ(c.unscanned, (std::vector<std::string>{"m"})) << c.family;
    EXPECT_DOUBLE_EQ(c.factor, c.family == "dense" ? 2.0 : 0.5) << c.family;  // still shown
  }
  for (const JobResultRow& j : kept) {
    EXPECT_EQ(j.config_key.find("lr_factor"), std::string::npos) << j.id;
  }
  EXPECT_EQ(kept.size(), 12u);  // s: dense and 3 X-MoD; m: dense and X-MoD; two seeds
  const QueryResult t = LrScanTable(jobs);
  int notes = 0;
  for (const auto& row : t.rows) {
    notes += std::get<std::string>(row[5]).find("not scanned at m") != std::string::npos;
  }
  EXPECT_EQ(notes, 2);
}

TEST(LrScan, AnIncompleteScanKeepsTheSweepsOwnLr) {
  std::vector<JobResultRow> jobs = {Finished(Family::kDense, "s", 0, 0, 1, 3.2),
                                    Finished(Family::kDense, "s", 0, 2, 1, 3.1),
                                    Finished(Family::kDense, "s", 0.0, 0, 2, 3.2)};
  // A second dense configuration that finished only its own lr and 0.5: the
  // factors every scanned configuration finished are {1} alone.
  JobResultRow other = Finished(Family::kDense, "s", 0, 0.5, 1, 3.0);
  other.budget_value = 40;
  nlohmann::json c = nlohmann::json::parse(other.config_key);
  c["budget"] = 40;
  other.config_key = c.dump();
  other.id += "/40";
  JobResultRow other_own = Finished(Family::kDense, "s", 0, 0, 1, 3.05);
  c = nlohmann::json::parse(other_own.config_key);
  c["budget"] = 40;
  other_own.config_key = c.dump();
  other_own.id += "/40";
  jobs.push_back(other);
  jobs.push_back(other_own);
  std::vector<LrScanChoice> choices;
  const std::vector<JobResultRow> kept = BestLrRuns(jobs, &choices);
  ASSERT_EQ(choices.size(), 1u);
  EXPECT_FALSE(choices[0].complete);
  EXPECT_DOUBLE_EQ(choices[0].factor, 1.0);
  for (const JobResultRow& j : kept) {
    EXPECT_EQ(j.config_key.find("lr_factor"), std::string::npos) << j.id;
  }
  EXPECT_EQ(kept.size(), 3u);
}

TEST(PairedDifferences, APairCarriesItsSeedIntervalAndWhatItMatches) {
  std::vector<JobResultRow> jobs;
  // Dense 3.0 ± 0.01 and X-MoD 2.9 ± 0.01 over three seeds; the X-MoD run's
  // realised capacity exceeds its nominal one by 10%.
  const double wobble[] = {-0.01, 0.0, 0.01};
  for (int64_t seed : {0, 1, 2}) {
    jobs.push_back(Finished(Family::kDense, "s", 0, 0, seed, 3.0 + wobble[seed]));
    JobResultRow x = Finished(Family::kXmod, "s", 0.5, 0, seed, 2.9 + wobble[seed]);
    x.final_capacity_causal = 0.55;
    x.train_flops = 1.004e12;
    jobs.push_back(x);
  }
  const QueryResult t = PairedDifferences(jobs);
  ASSERT_EQ(t.rows.size(), 1u);
  auto at = [&](const char* name) {
    const size_t i = std::find(t.columns.begin(), t.columns.end(), name) - t.columns.begin();
    EXPECT_LT(i, t.columns.size()) << name;
    return t.rows[0][i];
  };
  EXPECT_NEAR(std::get<double>(at("difference")), -0.1, 1e-12);
  // Pooled sd 0.01 over both configurations; se = 0.01 · sqrt(1/3 + 1/3).
  const double se = 0.01 * std::sqrt(2.0 / 3.0);
  EXPECT_NEAR(std::get<double>(at("diff_se")), se, 1e-12);
  EXPECT_NEAR(std::get<double>(at("low_95")), -0.1 - 1.96 * se, 1e-12);
  EXPECT_NEAR(std::get<double>(at("high_95")), -0.1 + 1.96 * se, 1e-12);
  EXPECT_EQ(std::get<std::string>(at("matched")), "training FLOPs");
  EXPECT_EQ(std::get<std::string>(at("sparsity_kind")), "skipped tokens (1 - capacity)");
  EXPECT_EQ(std::get<std::string>(at("capacity_flag")), "realised 10.0% above nominal");
  // Two percent more compute is no longer a training-FLOPs match.
  for (JobResultRow& j : jobs) {
    if (j.family == Family::kXmod) j.train_flops = 1.02e12;
  }
  EXPECT_EQ(std::get<std::string>(PairedDifferences(jobs).rows[0][18]),
            "FLOPs/token only (+2.0% total)");
}

}  // namespace
}  // namespace xmod
