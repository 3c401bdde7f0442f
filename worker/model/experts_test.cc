#include "worker/model/experts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "worker/model/expert_aux.h"
#include "worker/model/model.h"

namespace xmod {
namespace {

constexpr int64_t kD = 16;

torch::Tensor Inputs(int64_t n, uint64_t seed = 3) {
  torch::manual_seed(seed);
  return torch::randn({n, kD});
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(Moe, OneExpertTopOneIsTheDenseMlpOnTheSameWeights) {
  torch::manual_seed(1);
  Mlp dense(kD, 24);
  MoeMlp moe(MoeMlpOptions(kD, 1, 1, 24));
  {
    torch::NoGradGuard no_grad;
    // Linear weights are [out, in]; the experts' are [in, out].
    moe->w13[0].copy_(dense->w13->weight.t());
    moe->w2[0].copy_(dense->w2->weight.t());
  }
  const torch::Tensor x = Inputs(10).view({2, 5, kD});
  EXPECT_LT(MaxAbsDiff(moe->forward(x), dense->forward(x)), 1e-6);
}

TEST(Moe, BalancingLossIsOneWhenBalancedAndEWhenEveryTokenGoesToOneExpert) {
  const int64_t n = 12, e = 4, k = 2;
  const torch::Tensor uniform = torch::full({n, e}, 1.0 / e);
  const torch::Tensor balanced = torch::full({e}, double(n * k / e));
  EXPECT_NEAR(SwitchBalanceLoss(uniform, balanced, k).item<double>(), 1.0, 1e-12);
  torch::Tensor one_hot = torch::zeros({n, e});
  one_hot.select(1, 0).fill_(1.0);
  torch::Tensor all_on_one = torch::zeros({e});
  all_on_one[0] = double(n);
  EXPECT_NEAR(SwitchBalanceLoss(one_hot, all_on_one, 1).item<double>(), double(e), 1e-12);
}

TEST(Moe, ForwardReportsTheBalancingAndZLossesOfItsOwnLogits) {
  const int64_t n = 9, e = 5, k = 2;
  MoeMlp moe(MoeMlpOptions(kD, e, k, 8));
  const torch::Tensor x = Inputs(n);
  ExpertStats stats;
  moe->forward(x, &stats);
  const torch::Tensor z = moe->router(x).to(torch::kFloat64);
  // z-loss by hand: mean over tokens of (log Σ_e exp z)².
  double z_loss = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0.0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(z[t][j].item<double>());
    z_loss += std::pow(std::log(sum), 2) / double(n);
  }
  EXPECT_NEAR(stats.z_loss.item<double>(), z_loss, 1e-6);
  // Balancing: c_e from the top-k of each token, p the softmax over all experts.
  const torch::Tensor idx = std::get<1>(z.topk(k, -1));
  torch::Tensor counts = torch::zeros({e}, torch::kFloat64);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) counts[idx[t][j].item<int64_t>()] += 1.0;
  }
  const double expected = SwitchBalanceLoss(torch::softmax(z, -1), counts, k).item<double>();
  EXPECT_NEAR(stats.balance_loss.item<double>(), expected, 1e-6);
  EXPECT_EQ(stats.routed.sum().item<double>(), double(n * k));
  EXPECT_EQ(stats.dropped.item<double>(), 0.0);
}

// The reference: every token alone, through its k experts, with its gates.
torch::Tensor PerTokenReference(MoeMlpImpl& moe, const torch::Tensor& x) {
  const auto [idx, gates] = moe.Route(moe.router(x));
  torch::Tensor out = torch::zeros_like(x);
  for (int64_t t = 0; t < x.size(0); ++t) {
    for (int64_t j = 0; j < idx.size(1); ++j) {
      const int64_t e = idx[t][j].item<int64_t>();
      const auto h = torch::matmul(x[t], moe.w13[e]).chunk(2, -1);
      out[t] += gates[t][j] * torch::matmul(torch::silu(h[0]) * h[1], moe.w2[e]);
    }
  }
  if (!moe.shared.is_empty()) out += moe.shared->forward(x);
  return out;
}

TEST(Moe, DroplessDispatchEqualsAPerTokenLoopForEveryGate) {
  for (MoeGate gate : {MoeGate::kSoftmax, MoeGate::kPreSoftmax, MoeGate::kSigmoid}) {
    torch::manual_seed(5);
    MoeMlp moe(MoeMlpOptions(kD, 6, 2, 8).shared(1).gate(gate));
    const torch::Tensor x = Inputs(23);
    torch::NoGradGuard no_grad;
    EXPECT_LT(MaxAbsDiff(moe->forward(x), PerTokenReference(*moe, x)), 1e-5) << MoeGateName(gate);
  }
}

TEST(Moe, CapacityDroppingKeepsTheAssignmentsWithTheHighestGates) {
  const int64_t n = 10, e = 4;
  MoeMlp moe(MoeMlpOptions(kD, e, 1, 8).capacity_factor(1.0));
  torch::NoGradGuard no_grad;
  // Every token prefers expert 0, by a margin that differs from token to token.
  const torch::Tensor x = torch::rand({n, kD}) + 0.5;
  moe->router->weight.zero_();
  moe->router->weight[0].fill_(1.0);
  moe->router->weight[1].normal_(0.0, 0.2);
  ExpertStats stats;
  const torch::Tensor out = moe->forward(x, &stats);
  const int64_t capacity = (n * 1 + e - 1) / e;  // ceil(N·k/E · 1)
  EXPECT_EQ(stats.load[0].item<double>(), double(capacity));
  EXPECT_EQ(stats.dropped.item<double>(), double(n - capacity));
  const auto [idx, gates] = moe->Route(moe->router(x));
  ASSERT_TRUE((idx.select(1, 0) == 0).all().item<bool>());
  const torch::Tensor kept = std::get<1>(gates.select(1, 0).topk(capacity));
  std::set<int64_t> expected, computed;
  for (int64_t i = 0; i < capacity; ++i) expected.insert(kept[i].item<int64_t>());
  for (int64_t t = 0; t < n; ++t) {
    if (out[t].abs().sum().item<double>() > 0) computed.insert(t);
  }
  EXPECT_EQ(computed, expected);
}

TEST(Moe, BiasBalancingMovesAnOverloadedExpertDownByExactlyTheRate) {
  MoeMlp moe(MoeMlpOptions(kD, 4, 1, 8));
  const torch::Tensor routed = torch::tensor({10.0, 1.0, 1.0, 0.0}, torch::kFloat64);
  for (int step = 1; step <= 3; ++step) {
    moe->UpdateBias(routed, 1e-3);
    EXPECT_NEAR(moe->bias[0].item<double>(), -1e-3 * step, 1e-9);
    EXPECT_NEAR(moe->bias[3].item<double>(), 1e-3 * step, 1e-9);
  }
}

TEST(Deco, NormSiluIsInvariantToScaleAndShiftOfItsInput) {
  torch::manual_seed(2);
  const int64_t e = 3, width = 8;
  const torch::Tensor u = torch::randn({5, e * width}, torch::kFloat64);
  const torch::Tensor gamma = torch::rand({width}, torch::kFloat64) + 0.5;
  const torch::Tensor base = NormSilu(u, gamma, e, 0.0);
  EXPECT_LT(MaxAbsDiff(NormSilu(3.7 * u + 1.25, gamma, e, 0.0), base), 1e-12);
  // Before the SiLU, each expert block has RMS γ: with γ = 1 its mean square is 1.
  const torch::Tensor centred = (u - u.mean(-1, true)).view({5, e, width});
  const torch::Tensor normed = centred * torch::rsqrt(centred.pow(2).mean(-1, true));
  EXPECT_LT(MaxAbsDiff(NormSilu(u, torch::ones({width}, torch::kFloat64), e, 0.0),
                       torch::silu(normed).view({5, e * width})),
            1e-12);
}

TEST(Deco, NegativeRouterLogitsGiveExactlyTheSharedExpert) {
  DecoMlp deco(DecoMlpOptions(kD, 4, 8, 12));
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::rand({7, kD}) + 0.1;
  deco->router->weight.copy_(-torch::rand({4, kD}) - 0.1);
  ExpertStats stats;
  const torch::Tensor out = deco->forward(x, &stats);
  EXPECT_TRUE(torch::equal(out, deco->shared->forward(x)));
  EXPECT_EQ(stats.load.sum().item<double>(), 0.0);
}

TEST(Deco, DoublingTheScaleDoublesTheRoutedPartAndTheRouterGetsGradients) {
  DecoMlp deco(DecoMlpOptions(kD, 4, 8, 12));
  const torch::Tensor x = Inputs(7);
  torch::Tensor routed, doubled;
  {
    torch::NoGradGuard no_grad;
    routed = deco->forward(x) - deco->shared->forward(x);
    deco->expert_scale.mul_(2.0);
    doubled = deco->forward(x) - deco->shared->forward(x);
  }
  ASSERT_GT(routed.abs().max().item<double>(), 0.0);
  EXPECT_LT(MaxAbsDiff(doubled, 2.0 * routed), 1e-6);
  ExpertStats stats;
  (deco->forward(x, &stats).sum() + stats.entropy).backward();
  EXPECT_GT(deco->router->weight.grad().abs().sum().item<double>(), 0.0);
}

DecoderOptions DecoOptions() {
  ExpertShape e;
  e.experts = 4;
  e.width = 8;
  e.shared_width = 16;
  e.dense_layers = 1;
  e.target_ratio = 0.2;
  return DecoderOptions(32, kD, 2, 2, DefaultDff(kD), 8)
      .family(Family::kDeco)
      .experts(e)
      .entropy_init(1e-8)
      .entropy_multiplier(1.002);
}

TEST(Deco, TheControllerMovesLogCByExactlyLogMAndNeverBelowItsFloor) {
  Decoder model(DecoOptions());
  DecoObjective* deco = model->objective<DecoObjective>();
  ASSERT_NE(deco, nullptr);
  const double m = 1.002, c0 = 1e-8;
  EXPECT_EQ(deco->entropy_coef(), c0);
  for (int step = 1; step <= 5; ++step) {
    deco->UpdateEntropyCoef(0.5);  // above the target
    EXPECT_NEAR(std::log(deco->entropy_coef()), std::log(c0) + step * std::log(m), 1e-12);
  }
  for (int step = 0; step < 20; ++step) {
    deco->UpdateEntropyCoef(0.1);  // below
    EXPECT_GE(deco->entropy_coef(), c0);
  }
  EXPECT_EQ(deco->entropy_coef(), c0);
}

// The module holds exactly the parameters the accounting counts, per family.
TEST(Experts, DecoderParametersEqualTheAccounting) {
  for (Family family : {Family::kMoe, Family::kDeco}) {
    ModelShape s;
    s.family = family;
    s.d_model = 32;
    s.n_heads = 4;
    s.n_layers = 3;
    s.d_ff = DefaultDff(32);
    s.vocab_size = 64;
    s.context = 16;
    s.experts.experts = 5;
    s.experts.width = family == Family::kMoe ? s.d_ff / 2 : 16;
    s.experts.top_k = family == Family::kMoe ? 2 : 0;
    s.experts.shared = family == Family::kMoe ? 1 : 0;
    s.experts.shared_width = family == Family::kDeco ? 24 : 0;
    s.experts.dense_layers = family == Family::kDeco ? 1 : 0;
    s.experts.target_ratio = 0.2;
    Decoder model(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                      .family(family)
                      .experts(s.experts));
    const ParamCount count = CountParams(s);
    EXPECT_EQ(CountModuleParameters(*model), count.all()) << FamilyName(family);
  }
}

TEST(Experts, RecomputationIsRefusedForExpertFamilies) {
  EXPECT_THROW(Decoder(DecoOptions().recompute(true)), c10::Error);
}

}  // namespace
}  // namespace xmod
