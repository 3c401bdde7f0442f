#include "worker/model/fused_cpu.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/model/model.h"

namespace xmod {
namespace {

// Restores the process-wide switch however a test ends.
class FusedSwitch {
 public:
  FusedSwitch() : was_(FusedCpuKernels()) {}
  ~FusedSwitch() { SetFusedCpuKernels(was_); }

 private:
  bool was_;
};

// Largest |a − b| over the largest |b|, so one tolerance serves every scale.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a - b).abs().max().item<double>() / scale;
}

std::string NodeName(const torch::Tensor& t) {
  return t.grad_fn() ? t.grad_fn()->name() : std::string("(leaf)");
}

// Runs f on fresh leaf copies of `inputs` with the kernels on and off, and
// compares the outputs and every input's gradient under a random cotangent.
// Also checks that the fused run really went through `node` (no silent fallback).
void ExpectSameAsComposite(
    const std::vector<torch::Tensor>& inputs,
    const std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>& f,
    const std::string& node, double tol = 2e-6) {
  FusedSwitch restore;
  std::vector<torch::Tensor> outs[2], grads[2];
  torch::manual_seed(3);
  std::vector<torch::Tensor> cotangents;
  for (int fused = 1; fused >= 0; --fused) {
    SetFusedCpuKernels(fused == 1);
    std::vector<torch::Tensor> leaves;
    for (const auto& x : inputs) leaves.push_back(x.detach().clone().requires_grad_(true));
    outs[fused] = f(leaves);
    if (cotangents.empty()) {
      for (const auto& o : outs[fused]) cotangents.push_back(torch::randn_like(o));
    }
    if (fused == 1) {
      EXPECT_NE(NodeName(outs[1][0]).find(node), std::string::npos)
          << "the fused run took " << NodeName(outs[1][0]);
    } else {
      EXPECT_EQ(NodeName(outs[0][0]).find(node), std::string::npos);
    }
    torch::autograd::backward(outs[fused], cotangents);
    for (const auto& leaf : leaves) grads[fused].push_back(leaf.grad());
  }
  for (size_t i = 0; i < outs[0].size(); ++i) {
    ASSERT_EQ(outs[1][i].sizes(), outs[0][i].sizes()) << "output " << i;
    EXPECT_LT(RelativeError(outs[1][i], outs[0][i]), tol) << "output " << i;
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_TRUE(grads[1][i].defined() && grads[0][i].defined()) << "gradient " << i;
    EXPECT_LT(RelativeError(grads[1][i], grads[0][i]), tol) << "gradient of input " << i;
  }
}

TEST(FusedCpu, RmsNormMatchesTheCompositeFormInValueAndGradient) {
  torch::manual_seed(1);
  // 3·37 rows: more than one reduction block of the weight gradient, and a ragged last one.
  const torch::Tensor x = torch::randn({3, 37 * 5, 64}) * 3.0;
  const torch::Tensor w = torch::randn({64});
  ExpectSameAsComposite(
      {x, w},
      [](const auto& in) { return std::vector<torch::Tensor>{RmsNorm(in[0], in[1], 1e-5)}; },
      "RmsNorm");
}

TEST(FusedCpu, SwigluMatchesTheCompositeFormInValueAndGradient) {
  torch::manual_seed(2);
  const torch::Tensor gate_up = torch::randn({4, 9, 2 * 48}) * 4.0;
  ExpectSameAsComposite(
      {gate_up}, [](const auto& in) { return std::vector<torch::Tensor>{Swiglu(in[0])}; },
      "Swiglu");
}

TEST(FusedCpu, SplitRotaryMatchesTheCompositeFormForSharedAndPerSequenceAngles) {
  torch::manual_seed(4);
  const int64_t b = 3, n = 11, heads = 4, hd = 16;
  const torch::Tensor qkv = torch::randn({b, n, 3 * heads * hd});
  const torch::Tensor angles = torch::rand({b, n, hd / 2}) * 6.0;
  // Positions shared by every sequence ([1, N, hd/2], dense layers) and gathered
  // per sequence ([B, N, hd/2], routed layers).
  for (const torch::Tensor& a : {angles.narrow(0, 0, 1), angles}) {
    const torch::Tensor cos = a.cos(), sin = a.sin();
    ExpectSameAsComposite(
        {qkv},
        [&](const auto& in) {
          auto qkv_parts = SplitRotary(in[0], cos, sin, heads);
          return std::vector<torch::Tensor>{qkv_parts[0], qkv_parts[1], qkv_parts[2]};
        },
        "SplitRotary");
  }
}

TEST(FusedCpu, FallsBackToTheCompositeFormOutsideFloat32) {
  const torch::Tensor x = torch::randn({5, 32}, torch::kFloat64).requires_grad_(true);
  const torch::Tensor w = torch::ones({32}, torch::kFloat64);
  const torch::Tensor y = RmsNorm(x, w, 1e-5);
  EXPECT_EQ(y.scalar_type(), torch::kFloat64);
  EXPECT_EQ(NodeName(y).find("RmsNorm"), std::string::npos);
  const torch::Tensor h = Swiglu(torch::randn({5, 64}).to(torch::kBFloat16));
  EXPECT_EQ(h.scalar_type(), torch::kBFloat16);
}

// The whole decoder, dense and X-MoD (routed layers use per-sequence angles),
// with the kernels on and off: the same logits and parameter gradients.
class FusedDecoder : public ::testing::TestWithParam<Family> {};

TEST_P(FusedDecoder, GivesTheSameLogitsAndGradientsAsTheCompositeOps) {
  FusedSwitch restore;
  const Family family = GetParam();
  torch::manual_seed(5);
  const torch::Tensor tokens = torch::randint(0, 50, {2, 16});
  std::vector<torch::Tensor> logits, grads[2];
  for (int fused = 1; fused >= 0; --fused) {
    SetFusedCpuKernels(fused == 1);
    torch::manual_seed(7);
    Decoder model(DecoderOptions(50, 32, 4, 4, DefaultDff(32), 16)
                      .family(family)
                      .stride(family == Family::kDense ? 1 : 2)
                      .routed_tokens(family == Family::kDense ? 16 : 6)
                      .balance_coef(0.01)
                      .router_coef(0.01));
    const DecoderOutput out = model->forward(tokens);
    (out.logits.pow(2).mean() + out.aux_loss).backward();
    logits.push_back(out.logits);
    for (const auto& p : model->parameters()) grads[fused].push_back(p.grad());
  }
  EXPECT_LT(RelativeError(logits[0], logits[1]), 1e-5);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_LT(RelativeError(grads[1][i], grads[0][i]), 1e-4) << "parameter " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FusedDecoder,
                         ::testing::Values(Family::kDense, Family::kXmod, Family::kMod));

}  // namespace
}  // namespace xmod
