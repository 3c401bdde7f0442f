#include "orchestrator/sweep/expand.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

#include "common/id.h"

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

// The job count is bounded before anything is sized: a grid of 10^12 points is a
// clear file:line: grid: refusal with its count, not an allocation failure.
TEST(Expand, AGridOverTheJobLimitIsRefusedWithItsCountBeforeAnythingIsSized) {
  const SweepSpec smoke = Load("smoke");
  EXPECT_EQ(CountGridPoints(smoke), 8);
  EXPECT_TRUE(ExpandSweep(smoke, 8).ok());
  auto refused = ExpandSweep(smoke, 7);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status().message())
                .find(smoke.source + ":" + std::to_string(smoke.grid_line) +
                      ": grid: the grid makes 8 jobs, more than the limit of 7"),
            std::string::npos)
      << refused.status();

  std::string axis;
  for (int i = 1; i <= 10000; ++i) axis += (i > 1 ? ", " : "") + std::to_string(i);
  const std::string text =
      "name: huge\ndata: {synthetic: true, vocab_size: 64}\nfamily: xmod\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 4}}\n"
      "grid: {scale: [s], sparsity: [0.5, 0.75], stride: [" +
      axis + "], context: [" + axis + "], seed: [" + axis +
      "]}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: auto}\n"
      "design: {laws: []}\n";
  auto huge = ParseSweepSpec(text, "huge.yaml");
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(CountGridPoints(*huge), int64_t{2} * 10000 * 10000 * 10000);
  const auto start = std::chrono::steady_clock::now();
  auto big = ExpandSweep(*huge);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.status().message())
                .find("huge.yaml:5: grid: the grid makes 2000000000000 jobs, more than the "
                      "limit of 1000000"),
            std::string::npos)
      << big.status();
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

// The job file is the one contract: what the orchestrator writes, the worker's
// reader gives back field for field, and its canonical part is what the id hashes.
TEST(Expand, EveryJobFileReadsBackAsWrittenAndHashesToItsId) {
  for (const char* name : {"smoke", "demo", "xmod-cluster"}) {
    auto jobs = ExpandSweep(Load(name));
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    for (const ResolvedJob& j : *jobs) {
      const nlohmann::json written = j.ToJson();
      auto back = JobFileFromJson(written);
      ASSERT_TRUE(back.ok()) << name << " " << j.id << ": " << back.status();
      EXPECT_EQ(CanonicalJson(*back), j.CanonicalConfig()) << j.id;
      EXPECT_EQ(HexId(CanonicalJson(*back).dump()), j.id);
      EXPECT_EQ(ToJson(*back)["flops_per_token"], written["flops_per_token"]);
    }
  }
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
