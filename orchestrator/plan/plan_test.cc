// The planner's formulas and its accuracy: collectives and the pipeline bubble,
// Korthikanti et al.'s memory and step times, the optimizer-state bytes,
// monotonicity in expert traffic, the operation lists against xmod's accounting,
// the input files' refusals, and calibration on published throughput
// (tests/data/throughput, docs/planner.md "Validation").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/memory.h"
#include "orchestrator/plan/calibrate.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/perf_model.h"
#include "orchestrator/plan/plan_csv.h"

namespace xmod {
namespace {

std::string Source(const std::string& relative) {
  return std::string(XMOD_SOURCE_DIR) + "/" + relative;
}

ClusterProfile Profile(const std::string& name) {
  auto p = LoadClusterProfile(Source("clusters/" + name + ".yaml"));
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

std::vector<PlanRow> Rows(const std::string& file) {
  auto rows = ReadPlanRows(Source("tests/data/throughput/" + file), true);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *rows : std::vector<PlanRow>{};
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Megatron's GPT shapes of Korthikanti et al. 2022, Table 5 (calculon's
// validation inputs): h, layers, heads, TP, PP, micro-batch, global batch, v.
struct Gpt {
  const char* name;
  int64_t h, layers, heads, tp, pp, micro, batch, interleave;
  double params_optimizer_gib, act_none_gib, act_seqsel_gib;  // published
  double step_full_s, step_seqsel_s;
};
constexpr Gpt kKorthikanti[] = {
    {"22B", 6144, 48, 64, 8, 1, 4, 4, 1, 45.56, 59.25, 9.56, 1.42, 1.10},
    {"175B", 12288, 96, 96, 8, 8, 1, 64, 3, 45.56, 66.84, 12.35, 18.13, 13.75},
    {"530B", 20480, 105, 128, 8, 35, 1, 280, 3, 31.64, 114.02, 23.08, 49.05, 37.83},
    {"1T", 25600, 128, 160, 8, 64, 1, 512, 1, 32.96, 131.25, 26.56, 94.42, 71.49},
};

PlanModel GptModel(const Gpt& g) {
  PlanModel m;
  m.style = BlockStyle::kGpt;
  m.mlp = MlpKind::kGelu;
  m.shape.family = Family::kDense;
  m.shape.d_model = g.h;
  m.shape.n_layers = g.layers;
  m.shape.n_heads = g.heads;
  m.shape.d_ff = 4 * g.h;
  m.shape.vocab_size = 51200;
  m.shape.context = 2048;
  return m;
}

Layout GptLayout(const Gpt& g, RecomputeMode recompute, bool sp) {
  Layout l;
  l.tp = g.tp;
  l.pp = g.pp;
  l.dp = 1;
  l.gpus = g.tp * g.pp;
  l.gpus_per_node = 8;
  l.micro_batch = g.micro;
  l.global_batch = g.batch;
  l.interleave = g.interleave;
  l.recompute = recompute;
  l.sequence_parallel = sp;
  l.precision = Precision::kFp16;
  return l;
}

ParallelMemoryConfig MemoryOf(const Gpt& g, RecomputeMode recompute, bool sp) {
  ParallelMemoryConfig c;
  c.style = BlockStyle::kGpt;
  c.mlp = MlpKind::kGelu;
  c.micro_batch_rows = g.micro;
  c.micro_batches = g.batch / g.micro;
  c.tensor_parallel = g.tp;
  c.sequence_parallel = sp;
  c.pipeline_parallel = g.pp;
  c.interleave = g.interleave;
  c.recompute = recompute;
  c.fused_attention = false;  // Megatron's 2022 kernels kept the scores
  c.weight_bytes = 2;
  c.grad_bytes = 4;
  c.optimizer_bytes = 12;
  return c;
}

TEST(Collectives, RingFormulasAtTheirLimits) {
  const double m = 1e9, bw = 1e11;
  // Two ranks: an all-reduce moves the message once each way: M / BW (+ latency).
  EXPECT_NEAR(AllReduceSeconds(m, 2, bw, 0.0), m / bw, 1e-12);
  EXPECT_NEAR(AllReduceSeconds(m, 2, bw, 1e-5), m / bw + 2e-5, 1e-12);
  // Many ranks: 2 M / BW.
  EXPECT_NEAR(AllReduceSeconds(m, 1 << 20, bw, 0.0), 2 * m / bw, 1e-5 * m / bw);
  EXPECT_NEAR(ReduceScatterSeconds(m, 4, bw, 0.0), 0.75 * m / bw, 1e-12);
  EXPECT_NEAR(AllToAllSeconds(m, 8, bw, 0.0), 7.0 / 8.0 * m / bw, 1e-12);
  EXPECT_EQ(AllReduceSeconds(m, 1, bw, 1e-5), 0.0);
}

TEST(Pipeline, BubbleFractions) {
  EXPECT_DOUBLE_EQ(BubbleFraction(4, 8, 1), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(BubbleFraction(4, 8, 2), 3.0 / 16.0);
  EXPECT_DOUBLE_EQ(BubbleFraction(1, 8, 1), 0.0);
}

TEST(Pipeline, ThePredictedBubbleIsThatShareOfTheStep) {
  const Gpt g = kKorthikanti[1];
  ClusterProfile a100 = Profile("a100-80gb");
  PlanModel m = GptModel(g);
  m.shape.n_layers = 96;
  Layout l = GptLayout(g, RecomputeMode::kSelective, true);
  l.pp = 4;
  l.tp = 8;
  l.gpus = 32;
  l.global_batch = 8;
  l.interleave = 1;
  const Prediction p1 = Predict(m, l, a100, a100.efficiency);
  // Bubble / per-micro-batch work on the critical path = (p − 1)/(v·m).
  const double busy = p1.compute_s + p1.tp_comm_s + p1.pp_comm_s;
  EXPECT_NEAR(p1.bubble_s / busy, 3.0 / 8.0, 1e-9);
  l.interleave = 2;
  const Prediction p2 = Predict(m, l, a100, a100.efficiency);
  EXPECT_NEAR(p2.bubble_s / (p2.compute_s + p2.tp_comm_s + p2.pp_comm_s), 3.0 / 16.0, 1e-9);
}

TEST(Memory, KorthikantisActivationsAndStatesWithinFivePercent) {
  for (const Gpt& g : kKorthikanti) {
    SCOPED_TRACE(g.name);
    const PlanModel m = GptModel(g);
    const ParallelMemoryEstimate none =
        EstimateParallelMemory(m.shape, MemoryOf(g, RecomputeMode::kNone, false));
    const ParallelMemoryEstimate seqsel =
        EstimateParallelMemory(m.shape, MemoryOf(g, RecomputeMode::kSelective, true));
    EXPECT_NEAR(none.activations / kGiB / g.act_none_gib, 1.0, 0.05);
    EXPECT_NEAR(seqsel.activations / kGiB / g.act_seqsel_gib, 1.0, 0.05);
    // The published figure counts the transformer layers' states (18 bytes per
    // parameter); the stage that holds the embedding or the head holds those too.
    const double states = (none.weights + none.gradients + none.optimizer) / kGiB;
    const double embedding = 18.0 * none.embedding_parameters / kGiB;
    EXPECT_NEAR((states - embedding) / g.params_optimizer_gib, 1.0, 0.05);
    EXPECT_NEAR(states / g.params_optimizer_gib, 1.0, 0.10);
  }
}

TEST(Memory, KorthikantisRelativeReductionsWithinTwoPoints) {
  // Sequence parallelism + selective recomputation keep 16.2% (22B) and 18.5%
  // (175B) of the tensor-parallel baseline; full recomputation 7.6% and 8.7%.
  const double seqsel[] = {16.2, 18.5}, full[] = {7.6, 8.7};
  for (int i = 0; i < 2; ++i) {
    const Gpt& g = kKorthikanti[i];
    const PlanModel m = GptModel(g);
    const ParallelMemoryConfig base = MemoryOf(g, RecomputeMode::kNone, false);
    const double per_layer = GptLayerActivationBytes(m.shape, base);
    EXPECT_NEAR(100 *
                    GptLayerActivationBytes(m.shape, MemoryOf(g, RecomputeMode::kSelective, true)) /
                    per_layer,
                seqsel[i], 2.0);
    EXPECT_NEAR(100 * GptLayerActivationBytes(m.shape, MemoryOf(g, RecomputeMode::kFull, false)) /
                    per_layer,
                full[i], 2.0);
  }
}

TEST(Memory, DistributedOptimizerBytesPerParameter) {
  // Megatron's distributed optimizer with bf16 weights and fp32 gradients:
  // 6 + 12/d bytes per parameter (18 undistributed).
  PlanModel m = GptModel(kKorthikanti[0]);
  for (const int64_t d : {1, 2, 8, 64}) {
    ParallelMemoryConfig c = MemoryOf(kKorthikanti[0], RecomputeMode::kFull, true);
    c.data_parallel = d;
    c.zero_stage = d > 1 ? 1 : 0;
    const ParallelMemoryEstimate e = EstimateParallelMemory(m.shape, c);
    EXPECT_NEAR((e.weights + e.gradients + e.optimizer) / e.parameters, 6.0 + 12.0 / d, 1e-9);
  }
}

TEST(StepTime, KorthikantisStepTimesWithinFifteenPercent) {
  // The A100 profile's figures with the model's uncalibrated efficiencies
  // (Efficiency's defaults, not the profile's llm-foundry fit) and the 2022 runs'
  // unfused attention (Megatron's softmax kernel kept the scores).
  ClusterProfile a100 = Profile("a100-80gb");
  a100.efficiency = Efficiency{};
  a100.assumptions.fused_attention = false;
  a100.assumptions.causal_skip = false;
  for (const Gpt& g : kKorthikanti) {
    SCOPED_TRACE(g.name);
    const PlanModel m = GptModel(g);
    const Prediction full =
        Predict(m, GptLayout(g, RecomputeMode::kFull, false), a100, a100.efficiency);
    const Prediction seqsel =
        Predict(m, GptLayout(g, RecomputeMode::kSelective, true), a100, a100.efficiency);
    std::printf("%s: full %.2f s (published %.2f), seq+sel %.2f s (published %.2f)\n", g.name,
                full.step_s, g.step_full_s, seqsel.step_s, g.step_seqsel_s);
    EXPECT_NEAR(full.step_s / g.step_full_s, 1.0, 0.15);
    EXPECT_NEAR(seqsel.step_s / g.step_seqsel_s, 1.0, 0.15);
  }
}

// Calibrates on every k-th row of the runs measured on one kind of GPU and
// reports the error on the others.
struct Holdout {
  double median = 0, p90 = 0;
  int fitted = 0, predicted = 0;
};
Holdout CalibrateAndPredict(const ClusterProfile& cluster, const std::vector<PlanRow>& rows,
                            int every) {
  std::vector<PlanRow> fit, rest;
  for (size_t i = 0; i < rows.size(); ++i) (i % every == 0 ? fit : rest).push_back(rows[i]);
  auto cal = Calibrate(cluster, cluster.efficiency, fit);
  EXPECT_TRUE(cal.ok()) << cal.status();
  std::printf("  fit: converged %d, median %.3f -> %.3f; %s\n", cal->converged,
              cal->median_error_before, cal->median_error,
              EfficiencyToJson(cal->efficiency).dump().c_str());
  std::vector<double> errors;
  for (const PlanRow& r : rest) {
    const double p = Predict(r.model, r.layout, cluster, cal->efficiency).tokens_per_s;
    errors.push_back(p / r.tokens_per_s - 1.0);
  }
  Holdout h;
  h.median = MedianAbs(errors);
  h.p90 = PercentileAbs(errors, 0.9);
  h.fitted = static_cast<int>(fit.size());
  h.predicted = static_cast<int>(rest.size());
  return h;
}

// The efficiencies the profiles ship were fitted to llm-foundry's A100-80GB and
// H100 runs (clusters/*.yaml). The honest checks are therefore on runs those
// fits did not see, calibrated on every eighth of them from a start that did
// not see them either.
TEST(Accuracy, CalibratedOnAFewPublishedRunsPredictsTheOthers) {
  const ClusterProfile a100 = Profile("a100-80gb");
  const ClusterProfile h100 = Profile("h100-sxm");
  // A100-40GB runs from the A100-80GB fit; H100 runs from the A100 fit on the
  // H100's figures (a different chip's efficiencies: the calibration has to move).
  // H100: two folds; each starts from a fit to the other fold's runs.
  ClusterProfile a100_40 = Profile("a100-40gb");
  const std::vector<PlanRow> h100_rows = Rows("llmfoundry_h100_bf16.csv");
  std::vector<PlanRow> odd, even;
  for (size_t i = 0; i < h100_rows.size(); ++i) (i % 2 ? odd : even).push_back(h100_rows[i]);
  auto odd_fit = Calibrate(h100, h100.efficiency, odd);
  auto even_fit = Calibrate(h100, h100.efficiency, even);
  ASSERT_TRUE(odd_fit.ok() && even_fit.ok());
  struct Case {
    const char* name;
    ClusterProfile cluster;
    Efficiency start;
    std::vector<PlanRow> rows;
  };
  const Case sets[] = {
      {"llmfoundry_a100_40gb.csv", a100_40, a100.efficiency, Rows("llmfoundry_a100_40gb.csv")},
      {"llmfoundry_h100_bf16.csv (even rows)", h100, odd_fit->efficiency, even},
      {"llmfoundry_h100_bf16.csv (odd rows)", h100, even_fit->efficiency, odd}};
  for (const Case& s : sets) {
    ClusterProfile cluster = s.cluster;
    cluster.efficiency = s.start;
    const Holdout h = CalibrateAndPredict(cluster, s.rows, 8);
    std::printf("%s: calibrated on %d, predicted %d: median |error| %.1f%%, p90 %.1f%%\n", s.name,
                h.fitted, h.predicted, 100 * h.median, 100 * h.p90);
    EXPECT_LE(h.median, 0.06) << s.name;
    EXPECT_LE(h.p90, 0.15) << s.name;
  }
}

// The model's form: fitted to every run of a set, how close it comes.
TEST(Accuracy, TheFormFitsEachPublishedSet) {
  struct Set {
    const char* file;
    const char* profile;
  };
  const Set sets[] = {{"llmfoundry_a100_80gb.csv", "a100-80gb"},
                      {"llmfoundry_a100_40gb.csv", "a100-40gb"},
                      {"llmfoundry_h100_bf16.csv", "h100-sxm"},
                      {"llmfoundry_h100_fp8.csv", "h100-sxm"}};
  for (const Set& s : sets) {
    const ClusterProfile cluster = Profile(s.profile);
    const std::vector<PlanRow> rows = Rows(s.file);
    auto cal = Calibrate(cluster, cluster.efficiency, rows);
    ASSERT_TRUE(cal.ok()) << cal.status();
    std::printf("%s: %d runs, median |error| %.1f%% (uncalibrated %.1f%%), p90 %.1f%%\n", s.file,
                cal->rows, 100 * cal->median_error, 100 * cal->median_error_before,
                100 * cal->p90_error);
    EXPECT_TRUE(cal->converged) << s.file;
    EXPECT_LE(cal->median_error, 0.05) << s.file;
    EXPECT_LE(cal->p90_error, 0.12) << s.file;
  }
}

}  // namespace
}  // namespace xmod
