// The memory model (common/memory.h) against the bytes a real training run
// holds, measured exactly by the counting CPU allocator (memory_meter.h), on a
// few shapes: dense, X-MoD and the expert families moe and deco, eager and fused
// attention, with and without recomputation, one micro-batch and several, fp32
// and bf16.
#include "common/memory.h"

#include <gtest/gtest.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "worker/model/experts.h"
#include "worker/model/gated_deltanet.h"
#include "worker/model/model.h"
#include "worker/model/precision.h"
#include "worker/train/memory_meter.h"
#include "worker/train/trainer.h"

namespace xmod {
namespace {

TEST(CpuMemoryMeter, CountsEveryTensorStorageWhileItLives) {
  CpuMemoryMeter::Install();
  const int64_t before = CpuMemoryMeter::Current();
  CpuMemoryMeter::ResetPeak();
  {
    const torch::Tensor a = torch::empty({1 << 18}, torch::kFloat32);  // 1 MiB
    EXPECT_EQ(CpuMemoryMeter::Current() - before, int64_t{1} << 20);
    const torch::Tensor b = torch::empty_like(a);  // another MiB
    EXPECT_EQ(CpuMemoryMeter::Current() - before, int64_t{2} << 20);
  }
  EXPECT_EQ(CpuMemoryMeter::Current(), before);
  EXPECT_EQ(CpuMemoryMeter::Peak() - before, int64_t{2} << 20);
}

struct MemoryCase {
  const char* name;
  Family family;
  int64_t layers, stride;
  double capacity;
  int64_t micro;  // sequences per forward (of 8)
  bool recompute, bf16;
  AttentionPath path;
  ExpertShape experts = {};   // moe and deco
  MolShape mol = {};          // mol
  int64_t softmax_every = 0;  // gdn
};
void PrintTo(const MemoryCase& c, std::ostream* os) { *os << c.name; }

JobFile MemoryJob(const MemoryCase& c) {
  JobFile job;
  job.id = std::string("memory-") + c.name;
  job.shape.family = c.family;
  job.shape.d_model = 64;
  job.shape.n_heads = 4;
  job.shape.d_ff = DefaultDff(64);
  job.shape.vocab_size = 512;
  job.shape.context = 256;
  job.shape.n_layers = c.layers;
  job.shape.stride = c.stride;
  job.shape.capacity = c.capacity;
  job.shape.experts = c.experts;
  job.shape.mol = c.mol;
  job.shape.softmax_every = c.softmax_every;
  if (c.family == Family::kXmod || c.family == Family::kMod) {
    job.balance_coef = 0.01;
    job.router_coef = 0.01;
  } else if (c.family == Family::kMoe) {
    job.gate = "softmax";
    job.balance_coef = 0.01;
    job.expert_training.z_coef = 1e-3;
  } else if (c.family == Family::kMol || c.family == Family::kGdn) {
    job.gate = "none";
    job.balance_coef = 0.05;
  } else if (c.family == Family::kDeco) {
    job.gate = "relu";
    job.expert_training.entropy_init = 1e-4;
    job.expert_training.entropy_multiplier = 1.05;
  }
  job.routed_tokens = RoutedTokens(c.capacity, job.shape.context);
  job.steps = 2;
  job.batch_size = 8;
  job.micro_batch_size = c.micro;
  job.lr = 1e-3;
  job.min_lr = 1e-4;
  job.warmup_steps = 1;
  job.weight_decay = 0.1;
  job.grad_clip = 1.0;
  job.eval_interval = 2;
  job.eval_tokens = 8 * 256;
  job.checkpoint_interval = 1000;
  job.seed = 3;
  job.precision = c.bf16 ? "bf16" : "fp32";
  job.recompute = c.recompute;
  job.flops_per_token = TrainFlopsPerToken(job.shape);
  job.synthetic_seed = 5;
  return job;
}

class MemoryModel : public ::testing::TestWithParam<MemoryCase> {
 protected:
  void TearDown() override { SetAttentionPath(AttentionPath::kAuto); }
};

TEST_P(MemoryModel, PredictsTheMeasuredPeakOfATrainingRun) {
  const MemoryCase c = GetParam();
  if (c.path == AttentionPath::kFused && !HaveFusedAttention()) {
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused attention";
  }
  if (c.bf16 && !Bf16Unsupported(torch::kCPU).empty()) GTEST_SKIP() << "no bf16 on this CPU";
  SetAttentionPath(c.path);
  CpuMemoryMeter::Install();
  const JobFile job = MemoryJob(c);
  auto data = OpenJobData(job);
  ASSERT_TRUE(data.ok()) << data.status();
  auto comm = MakeSingleProcessCommunicator();
  TrainerOptions options;
  options.run_dir = (std::filesystem::temp_directory_path() /
                     ("xmod_memory_" + std::to_string(::getpid()) + "_" + c.name))
                        .string();
  options.threads = 1;
  const int64_t base = CpuMemoryMeter::Current();
  CpuMemoryMeter::ResetPeak();
  auto result = Train(job, **data, *comm, options);
  std::filesystem::remove_all(options.run_dir);
  ASSERT_TRUE(result.ok()) << result.status();
  const double measured = static_cast<double>(CpuMemoryMeter::Peak() - base);

  MemoryConfig config;
  config.micro_batch_rows = c.micro;
  config.micro_batches = job.batch_size / c.micro;
  config.eval_rows = std::min(EvalRows(c.micro, job.shape.context, job.shape.vocab_size),
                              job.eval_tokens / job.shape.context);
  config.bf16 = c.bf16;
  config.recompute = c.recompute;
  config.fused_attention = c.path == AttentionPath::kFused;
  config.cuda = false;
  const MemoryEstimate e = EstimateTrainingMemory(job.shape, config);
  std::printf("%-22s measured %8.2f MiB  model %8.2f MiB (%s)  ratio %.3f  [acts %.2f MiB]\n",
              c.name, measured / 1048576.0, e.peak / 1048576.0, e.peak_phase.c_str(),
              e.peak / measured, e.activations / 1048576.0);
  // The stated tolerance (docs/memory.md): the model is within -10% / +15% of the
  // measured peak; it errs high (by 13%) for fused attention with recomputation.
  // DECO on LibTorch 2.x: its autograd no longer keeps two tensors per expert
  // layer that 1.13 keeps and the model counts, so the model errs high by 19-30%
  // there (measured on 2.6), the safe direction for planning.
  const bool deco_on_2x = c.family == Family::kDeco && TORCH_VERSION_MAJOR >= 2;
  EXPECT_GT(e.peak / measured, 0.90) << c.name;
  EXPECT_LT(e.peak / measured, deco_on_2x ? 1.35 : 1.15) << c.name;
}

constexpr auto kEager = AttentionPath::kEager;
// experts, top_k, width, shared, shared_width, dense_layers, target_ratio
constexpr ExpertShape kMoeExperts{16, 4, 64, 1, 0, 0, 0.0};
constexpr ExpertShape kDecoExperts{32, 0, 32, 0, 64, 1, 0.2};
constexpr auto kFused = AttentionPath::kFused;
// thin_width, blocks, shared, top_k, routed Gated DeltaNet
constexpr MolShape kMolGdn{32, 5, 1, 2, true};
constexpr MolShape kMolSoftmax{32, 5, 1, 2, false};
INSTANTIATE_TEST_SUITE_P(
    Shapes, MemoryModel,
    ::testing::Values(
        MemoryCase{"DenseEager", Family::kDense, 4, 1, 1.0, 8, false, false, kEager},
        MemoryCase{"DenseFused", Family::kDense, 4, 1, 1.0, 8, false, false, kFused},
        MemoryCase{"DenseEagerRecompute", Family::kDense, 4, 1, 1.0, 8, true, false, kEager},
        MemoryCase{"DenseEagerMicro2", Family::kDense, 4, 1, 1.0, 2, false, false, kEager},
        MemoryCase{"DenseFusedMicro2", Family::kDense, 4, 1, 1.0, 2, false, false, kFused},
        MemoryCase{"XmodEagerRecompute", Family::kXmod, 8, 2, 0.25, 8, true, false, kEager},
        MemoryCase{"XmodEager", Family::kXmod, 8, 2, 0.25, 8, false, false, kEager},
        MemoryCase{"XmodFusedRecompute", Family::kXmod, 8, 2, 0.25, 8, true, false, kFused},
        MemoryCase{"DenseEagerBf16", Family::kDense, 4, 1, 1.0, 8, false, true, kEager},
        MemoryCase{"XmodFusedBf16", Family::kXmod, 8, 2, 0.25, 8, false, true, kFused},
        // moe: 16 experts of width 64, top-4, one shared expert; deco: 32 experts
        // of width 32 and a shared expert of width 64 after one dense layer.
        MemoryCase{"MoeEager", Family::kMoe, 4, 1, 1.0, 8, false, false, kEager, kMoeExperts},
        MemoryCase{"MoeEagerMicro2", Family::kMoe, 4, 1, 1.0, 2, false, false, kEager, kMoeExperts},
        MemoryCase{"MoeEagerBf16", Family::kMoe, 4, 1, 1.0, 8, false, true, kEager, kMoeExperts},
        MemoryCase{"MoeFused", Family::kMoe, 4, 1, 1.0, 8, false, false, kFused, kMoeExperts},
        MemoryCase{"DecoEager", Family::kDeco, 4, 1, 1.0, 8, false, false, kEager, kDecoExperts},
        MemoryCase{"DecoEagerMicro2", Family::kDeco, 4, 1, 1.0, 2, false, false, kEager,
                   kDecoExperts},
        MemoryCase{"DecoEagerBf16", Family::kDeco, 4, 1, 1.0, 8, false, true, kEager, kDecoExperts},
        MemoryCase{"DecoFused", Family::kDeco, 4, 1, 1.0, 8, false, false, kFused, kDecoExperts},
        // mol: stages of 1 shared and top-2 of 4 routed blocks of width 32 (two heads
        // of 16), Gated DeltaNet or softmax in the routed ones.
        MemoryCase{"MolEager", Family::kMol, 4, 1, 1.0, 8, false, false, kEager, {}, kMolGdn},
        MemoryCase{"MolEagerMicro2", Family::kMol, 4, 1, 1.0, 2, false, false, kEager, {}, kMolGdn},
        MemoryCase{"MolEagerBf16", Family::kMol, 4, 1, 1.0, 8, false, true, kEager, {}, kMolGdn},
        MemoryCase{
            "MolSoftmaxEager", Family::kMol, 4, 1, 1.0, 8, false, false, kEager, {}, kMolSoftmax},
        // gdn: every layer Gated DeltaNet, or a hybrid keeping softmax in every 2nd.
        MemoryCase{"GdnEager", Family::kGdn, 4, 1, 1.0, 8, false, false, kEager},
        MemoryCase{"GdnEagerMicro2", Family::kGdn, 4, 1, 1.0, 2, false, false, kEager},
        MemoryCase{"GdnEagerBf16", Family::kGdn, 4, 1, 1.0, 8, false, true, kEager},
        MemoryCase{"GdnHybridEager", Family::kGdn, 4, 1, 1.0, 8, false, false, kEager, {}, {}, 2}),
    [](const ::testing::TestParamInfo<MemoryCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

// The peak bytes of one forward and backward pass of `mixer` on x [1, t, d]
// (4 heads of 16),
// above what was alive before (the input and the weights).
int64_t MixerPeak(TokenMixerImpl& mixer, int64_t t, int64_t d) {
  CpuMemoryMeter::Install();
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({1, t, d}).requires_grad_();
  TokenPositions at;  // no rotation (attention reads the angles; DeltaNet ignores them)
  at.cos = torch::ones({1, t, 8});
  at.sin = torch::zeros({1, t, 8});
  const int64_t before = CpuMemoryMeter::Current();
  CpuMemoryMeter::ResetPeak();
  mixer.forward(x, at).sum().backward();
  return CpuMemoryMeter::Peak() - before;
}

// Gated DeltaNet's activations grow with T, not T²: quadrupling the context at
// most quadruples the peak (plus slack for the fixed-size state and chunk
// matrices). Eager softmax attention on the same shapes, which holds [H, T, T]
// scores, grows by far more than that, so the measure can tell the two apart.
TEST(GatedDeltaNetMemory, ActivationsGrowLinearlyWithTheContext) {
  const int64_t d = 64;
  torch::manual_seed(2);
  GatedDeltaNet gdn(GatedDeltaNetOptions(d, 4));
  Attention attention(d, 4);
  {
    torch::NoGradGuard no_grad;
    gdn->InitWeights({});
    attention->InitWeights({});
  }
  const AttentionPath was = CurrentAttentionPath();
  SetAttentionPath(AttentionPath::kEager);
  const int64_t gdn_short = MixerPeak(*gdn, 512, d), gdn_long = MixerPeak(*gdn, 2048, d);
  const int64_t att_short = MixerPeak(*attention, 512, d),
                att_long = MixerPeak(*attention, 2048, d);
  SetAttentionPath(was);
  const double gdn_growth = double(gdn_long) / double(gdn_short);
  const double att_growth = double(att_long) / double(att_short);
  std::printf(
      "peak bytes at T = 512 / 2048: gated deltanet %lld / %lld (x%.2f), eager attention "
      "%lld / %lld (x%.2f)\n",
      static_cast<long long>(gdn_short), static_cast<long long>(gdn_long), gdn_growth,
      static_cast<long long>(att_short), static_cast<long long>(att_long), att_growth);
  EXPECT_LE(gdn_growth, 4.4);
  EXPECT_GE(att_growth, 8.0);
  EXPECT_LT(gdn_long, att_long);
}

}  // namespace
}  // namespace xmod
