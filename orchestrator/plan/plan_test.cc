// The planner's formulas and its accuracy: collectives and the pipeline bubble,
// Korthikanti et al.'s memory and step times, the optimizer-state bytes,
// monotonicity in expert traffic, the operation lists against xmod's accounting,
// the input files' refusals, and calibration on published throughput
// (tests/data/throughput, docs/planner.md "Validation").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/memory.h"
#include "orchestrator/plan/calibrate.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/codesign.h"
#include "orchestrator/plan/layout_search.h"
#include "orchestrator/plan/perf_model.h"
#include "orchestrator/plan/plan_csv.h"
#include "tests/paths/paths.h"

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

// xmod's families: the operation lists' forward FLOPs per token match the
// accounting's (common/accounting.h) within 2% (the accounting leaves out the
// small router and decay projections the lists time).
TEST(Operations, EveryFamilysFlopsMatchTheAccounting) {
  ModelShape base;
  base.d_model = 512;
  base.n_heads = 8;
  base.n_layers = 8;
  base.d_ff = DefaultDff(512);
  base.vocab_size = 32000;
  base.context = 1024;
  std::vector<ModelShape> shapes;
  shapes.push_back(base);
  ModelShape x = base;
  x.family = Family::kXmod;
  x.stride = 2;
  x.capacity = 0.25;
  shapes.push_back(x);
  ModelShape moe = base;
  moe.family = Family::kMoe;
  moe.experts = {8, 2, 256, 1, 0, 1, 0.0};
  shapes.push_back(moe);
  ModelShape deco = base;
  deco.family = Family::kDeco;
  deco.experts = {16, 0, 128, 0, 64, 1, 0.25};
  shapes.push_back(deco);
  ModelShape mol = base;
  mol.family = Family::kMol;
  mol.mol = {128, 5, 1, 2, true};
  shapes.push_back(mol);
  ModelShape gdn = base;
  gdn.family = Family::kGdn;
  gdn.softmax_every = 2;
  shapes.push_back(gdn);
  for (const ModelShape& shape : shapes) {
    SCOPED_TRACE(std::string(Traits(shape.family).name));
    PlanModel m;
    m.shape = shape;
    m.style = BlockStyle::kXmod;
    EXPECT_NEAR(OperationFlopsPerToken(m) / ForwardFlopsPerToken(shape), 1.0, 0.02);
  }
}

TEST(Monotonicity, ExpertTrafficNeverLowersTheStepTime) {
  const ClusterProfile h100 = Profile("h100-sxm");
  PlanModel m;
  m.style = BlockStyle::kXmod;
  m.shape.family = Family::kMoe;
  m.shape.d_model = 2048;
  m.shape.n_heads = 16;
  m.shape.n_layers = 16;
  m.shape.d_ff = DefaultDff(2048);
  m.shape.vocab_size = 50304;
  m.shape.context = 2048;
  m.shape.experts = {64, 2, 1024, 0, 0, 0, 0.0};
  Layout l;
  l.gpus = 64;
  l.dp = 64;
  l.ep = 8;
  l.micro_batch = 4;
  l.global_batch = 256;
  l.zero_stage = 1;
  // More all-to-all bytes (a slower network) never make a step faster.
  double last = 0;
  for (const double bw : {400e9, 200e9, 100e9, 50e9, 25e9, 12e9}) {
    ClusterProfile c = h100;
    c.inter_bandwidth = bw;
    c.intra_bandwidth = std::min(c.intra_bandwidth, 4 * bw);
    const Prediction p = Predict(m, l, c, c.efficiency);
    EXPECT_GE(p.step_s, last) << bw;
    EXPECT_GT(p.ep_comm_s, 0.0);
    last = p.step_s;
  }
  // Expert parallelism across nodes (ep 16 spans two nodes) costs more exposed
  // all-to-all time than within one.
  Layout wide = l;
  wide.ep = 16;
  EXPECT_GT(Predict(m, wide, h100, h100.efficiency).ep_comm_s,
            Predict(m, l, h100, h100.efficiency).ep_comm_s);
  // More experts at a fixed k never lower the memory.
  double memory = 0;
  for (const int64_t e : {8, 16, 32, 64, 128}) {
    m.shape.experts.experts = e;
    const double now = Predict(m, l, h100, h100.efficiency).memory.total;
    EXPECT_GE(now, memory) << e;
    memory = now;
  }
}

TEST(LayoutSearch, SevenBillionDenseOnSixtyFourH100s) {
  const ClusterProfile h100 = Profile("h100-sxm");
  PlanModel m;
  m.style = BlockStyle::kGpt;
  m.mlp = MlpKind::kSwiglu;
  m.shape.d_model = 4096;
  m.shape.n_layers = 32;
  m.shape.n_heads = 32;
  m.shape.d_ff = 11008;
  m.shape.vocab_size = 32000;
  m.shape.context = 4096;
  LayoutQuery q;
  q.gpus = 64;
  q.global_batch = 512;
  const LayoutSearchResult r = SearchLayouts(m, h100, h100.efficiency, q);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GT(r.considered, 100);
  for (size_t i = 0; i < r.best.size(); ++i) {
    EXPECT_LE(r.best[i].prediction.memory.total, 0.9 * h100.hbm_bytes);
    EXPECT_TRUE(CheckLayout(m, r.best[i].layout).ok());
    if (i > 0) {
      EXPECT_GE(r.best[i].prediction.step_s, r.best[i - 1].prediction.step_s);
    }
  }
  const Prediction& best = r.best[0].prediction;
  std::printf(
      "7B on 64 H100s: tp %ld pp %ld dp %ld mb %ld zero %d recompute %s: %.0f tokens/s, "
      "MFU %.3f, %.1f GB\n",
      (long)r.best[0].layout.tp, (long)r.best[0].layout.pp, (long)r.best[0].layout.dp,
      (long)r.best[0].layout.micro_batch, r.best[0].layout.zero_stage,
      RecomputeName(r.best[0].layout.recompute), best.tokens_per_s, best.mfu, best.memory_gb);
  // A 7B model fits without model parallelism; the search must not pay for it.
  EXPECT_EQ(r.best[0].layout.pp, 1);
  EXPECT_GT(best.mfu, 0.3);
  EXPECT_LT(best.mfu, 0.7);
  // On 8 GPUs with a tiny memory, nothing fits, and the search says so.
  ClusterProfile tiny = h100;
  tiny.hbm_bytes = 8e9;
  q.gpus = 8;
  q.global_batch = 8;
  EXPECT_TRUE(SearchLayouts(m, tiny, tiny.efficiency, q).best.empty());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kHeader[] =
    "family,d_model,n_layers,n_heads,d_ff,mlp,vocab,seq_len,gpus,gpus_per_node,micro_batch,"
    "global_batch,tp,pp,dp,zero_stage,recompute,precision";

TEST(PlanCsv, RefusesBadRowsNamingTheLine) {
  const std::string good = "dense,1024,24,16,4096,gelu,50368,2048,8,8,4,64,1,1,8,3,none,bf16";
  struct Case {
    std::string text;
    bool measured;
    std::string error;
  };
  const Case cases[] = {
      {std::string(kHeader) + ",tokens_per_s\n" + good + ",1000\n" + good + ",\n", true,
       ":3: tokens_per_s: empty"},
      {std::string(kHeader) + "\n" + good + "\n" +
           "dense,1024,24,16,4096,gelu,50368,2048,8,8,4,"
           "64,3,1,8,3,none,bf16\n",
       false, ":3: layout: tp × pp × dp = 24 is not the 8 GPUs"},
      {std::string(kHeader) + "\n" +
           "dense,1024,24,16,4096,relu,50368,2048,8,8,4,64,1,1,8,3,"
           "none,bf16\n",
       false, ":2: mlp: 'relu' is not one of gelu, swiglu"},
      {std::string(kHeader) + ",speed\n" + good + ",3\n", false, "unknown column 'speed'"},
      {std::string(kHeader) + ",tokens_per_s\n" + good + ",5\n", false,
       "column 'tokens_per_s' is a measurement"},
      {std::string(kHeader) + "\n" +
           "dense,1024,24,16,4096,gelu,50368,2048,8,8,3,64,1,1,8,3,"
           "none,bf16\n",
       false, ":2: layout: global_batch 64 is not a multiple of micro_batch × dp = 24"},
      {std::string(kHeader) + "\n" +
           "moe,1024,24,16,4096,swiglu,50368,2048,8,8,4,64,1,1,8,3,"
           "none,bf16\n",
       false, ":2: experts: column missing"},
      {"family,d_model\n", false, "missing column 'n_layers'"},
  };
  for (const Case& c : cases) {
    auto rows = ReadPlanRows(WriteFile("rows.csv", c.text), c.measured);
    ASSERT_FALSE(rows.ok()) << c.text;
    EXPECT_NE(std::string(rows.status().message()).find(c.error), std::string::npos)
        << rows.status();
  }
  auto rows =
      ReadPlanRows(WriteFile("rows.csv", std::string(kHeader) + ",name\n" + good + ",a\n"), false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ((*rows)[0].name, "a");
  EXPECT_EQ((*rows)[0].layout.zero_stage, 3);
}

TEST(ClusterProfile, RefusesMissingAndUnknownFigures) {
  auto p = ParseClusterProfile("device: x\npeak_tflops: 100\nhbm_gb: 80\nwarp: 9\n", "c.yaml");
  ASSERT_FALSE(p.ok());
  const std::string m(p.status().message());
  EXPECT_NE(m.find("c.yaml:4: warp: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("hbm_bandwidth_gbps: required figure missing"), std::string::npos) << m;
  EXPECT_NE(m.find("intra_node: required"), std::string::npos) << m;
  auto neg = ParseClusterProfile(
      "device: x\npeak_tflops: -1\nhbm_gb: 80\nhbm_bandwidth_gbps: 1\ngpus_per_node: 8\n"
      "intra_node: {bandwidth_gbps: 1, latency_us: 1}\ninter_node: {bandwidth_gbps: 1, "
      "latency_us: 1}\n",
      "n.yaml");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(std::string(neg.status().message()).find("n.yaml:2: peak_tflops: must be > 0"),
            std::string::npos)
      << neg.status();
  for (const char* name : {"h100-sxm", "h200-sxm", "a100-80gb", "a100-40gb", "cpu-2core"}) {
    const ClusterProfile c = Profile(name);
    EXPECT_EQ(c.name, name);
    EXPECT_GT(c.peak_flops, 0);
  }
}

TEST(Calibration, WritesAndReadsBackAndRefusesAnotherCluster) {
  const ClusterProfile a100 = Profile("a100-80gb");
  const std::vector<PlanRow> rows = Rows("korthikanti2022_a100.csv");
  auto cal = Calibrate(a100, a100.efficiency, rows);
  ASSERT_TRUE(cal.ok()) << cal.status();
  const std::string path = WriteFile("cal.json", CalibrationToJson(a100, *cal, rows).dump());
  auto back = LoadCalibration(path, a100);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->gemm_max, cal->efficiency.gemm_max);
  auto other = LoadCalibration(path, Profile("h100-sxm"));
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.status().message()).find("calibrated for cluster 'a100-80gb'"),
            std::string::npos);
}

// MOSAIC's claim on a MoE law whose gains grow monotonically with expansion
// (L = E + A / (N_active · Ê^γ)^α + B / D^β): with a FLOPs budget the most
// experts win; on a cluster, the experts' memory and all-to-all traffic cost
// throughput, so fewer tokens are trained and the optimum moves inside.
TEST(Codesign, TheFlopsOnlyOptimumIsTheLargestExpansionAndTheClusterOneIsInterior) {
  const ClusterProfile h100 = Profile("h100-sxm");
  std::vector<CodesignCandidate> candidates;
  for (const int64_t expansion : {1, 2, 4, 8, 16, 32, 64}) {
    CodesignCandidate c;
    ModelShape& s = c.model.shape;
    s.family = expansion == 1 ? Family::kDense : Family::kMoe;
    s.d_model = 4096;
    s.n_heads = 32;
    s.n_layers = 32;
    s.d_ff = DefaultDff(4096);
    s.vocab_size = 50304;
    s.context = 4096;
    if (expansion > 1) s.experts = {2 * expansion, 2, DefaultDff(4096) / 2, 0, 0, 0, 0.0};
    c.model.style = BlockStyle::kXmod;
    c.name = absl::StrCat("moe E/k=", expansion);
    c.configuration = c.name;
    c.point.n = static_cast<double>(CountParams(DenseReference(s, s.n_layers)).non_embedding);
    c.point.n_total = static_cast<double>(CountParams(s).non_embedding);
    c.point.expansion = static_cast<double>(expansion);
    c.point.context = 4096;
    candidates.push_back(c);
  }
  const LossModel truth = [](const LawPoint& x) -> absl::StatusOr<LossPrediction> {
    const double n_eff = x.n * std::pow(x.expansion, 0.3);
    LossPrediction p;
    p.loss = 1.7 + 400.0 / std::pow(n_eff, 0.34) + 410.0 / std::pow(x.d, 0.28);
    return p;
  };
  CodesignOptions o;
  o.gpu_hours = 64 * 24;
  o.gpus = 64;
  o.global_batch = 512;
  auto r = Codesign(candidates, truth, h100, h100.efficiency, o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const CodesignRow& row : r->rows) {
    std::printf(
        "%-12s fits %d  %s  MFU %.3f  %.1f GB  D %.3g (FLOPs-only %.3g)  loss %.4f "
        "(FLOPs-only %.4f)\n",
        row.candidate.name.c_str(), row.fits, RecomputeName(row.layout.layout.recompute),
        row.layout.prediction.mfu, row.layout.prediction.memory_gb, row.tokens,
        row.flops_only_tokens, row.loss, row.flops_only_loss);
  }
  std::printf("wall-clock optimum %s, FLOPs-only optimum %s: %s\n",
              r->rows[r->best].candidate.name.c_str(),
              r->rows[r->flops_best].candidate.name.c_str(), r->constraint.c_str());
  EXPECT_EQ(r->flops_best, static_cast<int>(candidates.size()) - 1);
  EXPECT_GT(r->best, 0);
  EXPECT_LT(r->best, static_cast<int>(candidates.size()) - 1);
  EXPECT_THAT(r->constraint, ::testing::HasSubstr("memory"));
  // The plot of both views.
  const std::string svg = ::testing::TempDir() + "/mosaic.svg";
  ASSERT_TRUE(DrawCodesign(*r, svg).ok());
  std::ifstream drawn(svg);
  std::stringstream image;
  image << drawn.rdbuf();
  EXPECT_THAT(image.str(), ::testing::HasSubstr("moe_E/k=64"));
  if (const char* keep = std::getenv("XMOD_PLAN_SVG")) std::ofstream(keep) << image.str();
  // The wall-clock optimum is on the Pareto front; the dense model (least memory
  // and parameters) is too.
  EXPECT_TRUE(r->rows[r->best].pareto);
  EXPECT_TRUE(r->rows[0].pareto);
}

// Context parallelism: each rank holds 1/cp of every sequence (activations and
// logits / cp), the states shard over data × context ranks, the K/V ring costs
// communication that attention hides only in part, and a long context that fits
// on no layout without it fits with it.
TEST(ContextParallel, SplitsTheSequenceAndItsMemory) {
  const ClusterProfile h100 = Profile("h100-sxm");
  PlanModel m;
  m.style = BlockStyle::kGpt;
  m.mlp = MlpKind::kSwiglu;
  m.kv_heads = 8;
  m.shape.d_model = 4096;
  m.shape.n_layers = 32;
  m.shape.n_heads = 32;
  m.shape.d_ff = 14336;
  m.shape.vocab_size = 128256;
  m.shape.context = 131072;
  Layout one;
  one.gpus = 64;
  one.tp = 8;
  one.dp = 8;
  one.micro_batch = 1;
  one.global_batch = 8;
  one.zero_stage = 1;
  one.recompute = RecomputeMode::kSelective;
  Layout four = one;
  four.dp = 2;
  four.cp = 4;
  four.global_batch = 2;
  ASSERT_TRUE(CheckLayout(m, one).ok());
  ASSERT_TRUE(CheckLayout(m, four).ok());
  const Prediction a = Predict(m, one, h100, h100.efficiency);
  const Prediction b = Predict(m, four, h100, h100.efficiency);
  EXPECT_NEAR(b.memory.activations / a.memory.activations, 0.25, 1e-9);
  EXPECT_NEAR(b.memory.logits / a.memory.logits, 0.25, 1e-9);
  EXPECT_NEAR(b.memory.optimizer, a.memory.optimizer, 1e-6 * a.memory.optimizer);  // 8 ranks both
  EXPECT_EQ(a.cp_comm_s, 0.0);
  EXPECT_GT(b.cp_comm_s, 0.0);
  EXPECT_FALSE(a.fits);
  EXPECT_TRUE(b.fits);
  Layout odd = four;
  m.shape.context = 131068;  // not 2 × 4 equal chunks
  EXPECT_FALSE(CheckLayout(m, odd).ok());
  m.shape.context = 131072;
  LayoutQuery q;
  q.gpus = 64;
  q.global_batch = 8;
  const LayoutSearchResult r = SearchLayouts(m, h100, h100.efficiency, q);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GT(r.best[0].layout.cp, 1);
}

}  // namespace
}  // namespace xmod
