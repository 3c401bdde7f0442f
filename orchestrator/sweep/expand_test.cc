#include "orchestrator/sweep/expand.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

namespace xmod {
namespace {

SweepSpec Load(const std::string& name) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/sweeps/" + name + ".yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The worst FLOP mismatch integer layer counts allow: half of the costliest layer.
double MatchTolerance(const ResolvedJob& job) {
  ModelShape one = DenseReference(job.shape, 1);
  const double dense_layer = ForwardFlopsPerToken(one) - 2.0 * one.d_model * one.vocab_size;
  return 0.5 * 3.0 * dense_layer / job.dense_flops_per_token;
}

TEST(Expand, SmokeSweepHasEightDistinctJobs) {
  auto jobs = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 8u);
  std::set<std::string> ids;
  for (const ResolvedJob& j : *jobs) ids.insert(j.id);
  EXPECT_EQ(ids.size(), jobs->size());
}

TEST(Expand, IdsAreStableAcrossExpansions) {
  const SweepSpec spec = Load("smoke");
  auto a = ExpandSweep(spec);
  auto b = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].id, (*b)[i].id);
  // Pinned: an id changes only when the canonical config (or its hash) does.
  EXPECT_EQ((*a)[2].shape.family, Family::kDense);
  EXPECT_EQ((*a)[2].id, "565dc07eba5346ea");
}

TEST(Expand, StrideOnePointIsTheDenseBaselineJob) {
  SweepSpec spec = Load("smoke");
  spec.grid_stride = {1, 2};
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok());
  // Per scale: sparsity {0.5, 0.875} x stride 1 collapse into the dense job,
  // stride 2 gives two X-MoD jobs, plus the MoD baseline: 4 jobs, as before.
  EXPECT_EQ(jobs->size(), 8u);
}

TEST(Expand, ClusterSweepIsFlopMatchedAtThreeBudgetsPerActiveParameter) {
  auto jobs = ExpandSweep(Load("xmod-cluster"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_GT(jobs->size(), 100u);
  double worst = 0.0;
  for (const ResolvedJob& j : *jobs) {
    const double r = j.budget_value;
    EXPECT_TRUE(r == 10.0 || r == 20.0 || r == 40.0) << j.id;
    EXPECT_EQ(j.tokens, std::llround(r * static_cast<double>(j.n_params_active))) << j.id;
    EXPECT_GE(j.tokens_trained(), j.tokens) << j.id;
    EXPECT_LE(std::abs(j.flops_ratio() - 1.0), MatchTolerance(j)) << j.id;
    worst = std::max(worst, std::abs(j.flops_ratio() - 1.0));
    EXPECT_LE(j.n_params_active, j.n_params_total) << j.id;
  }
  EXPECT_LT(worst, 0.05);
}

TEST(Expand, MatchLayersKeepsTheDenseDepth) {
  SweepSpec spec = Load("smoke");
  spec.match = MatchMode::kLayers;
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok());
  for (const ResolvedJob& j : *jobs) EXPECT_EQ(j.shape.n_layers, 4) << j.id;
}

TEST(Expand, ResolvesScheduleBatchAndRouting) {
  auto jobs = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(jobs.ok());
  const ResolvedJob& x = (*jobs)[0];  // micro, sparsity 0.5, stride 2
  EXPECT_EQ(x.shape.family, Family::kXmod);
  EXPECT_EQ(x.routed_tokens, 16);  // round(0.5 * 32)
  EXPECT_EQ(x.gate, "variance_scaled");
  EXPECT_EQ(x.batch_size, 32);  // 1024 tokens / context 32
  EXPECT_EQ(x.steps, 16);       // 16384 / 1024
  EXPECT_EQ(x.warmup_steps, 2);
  EXPECT_DOUBLE_EQ(x.train_flops, x.flops_per_token * 16 * 1024);
  const ResolvedJob& mod = (*jobs)[3];
  EXPECT_EQ(mod.shape.family, Family::kMod);
  EXPECT_EQ(mod.gate, "sigmoid");
  EXPECT_EQ(mod.routed_tokens, 4);  // round(0.125 * 32)
  EXPECT_EQ(mod.balance_coef, 0.0);
}

TEST(Expand, TenThousandJobGridTakesWellUnderASecond) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/bench/grid-10k.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto start = std::chrono::steady_clock::now();
  auto jobs = ExpandSweep(*spec);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 10000u);
  EXPECT_LT(seconds, 0.5) << "expanding 10,000 jobs took " << seconds << " s";
}

}  // namespace
}  // namespace xmod
