#include "worker/model/mol_stage.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xmod {
namespace {

constexpr int64_t kD = 64, kThin = 32, kHeadDim = 16, kT = 40;

// Rotary tables [1, T, head_dim / 2] for positions 0 .. T−1.
std::pair<torch::Tensor, torch::Tensor> Rope(int64_t t, int64_t head_dim) {
  const torch::Tensor pos = torch::arange(t, torch::kFloat32).unsqueeze(1);
  const torch::Tensor inv =
      torch::pow(10000.0, -torch::arange(0, head_dim, 2, torch::kFloat32) / double(head_dim));
  return {(pos * inv).cos().unsqueeze(0), (pos * inv).sin().unsqueeze(0)};
}

MolStage MakeStage(int64_t blocks, int64_t shared, int64_t top_k, uint64_t seed,
                   MolMixer routed = MolMixer::kDeltaNet) {
  torch::manual_seed(seed);
  MolStage stage(
      MolStageOptions(kD, kThin, kHeadDim, blocks, shared, top_k).routed_attention(routed));
  torch::NoGradGuard no_grad;
  stage->InitWeights(InitScales{0.05, 0.05});
  return stage;
}

TEST(MolStage, AThinBlockWhoseBlockIsTheIdentityAddsNothing) {
  MolStage stage = MakeStage(3, 1, 1, 1);
  torch::NoGradGuard no_grad;
  auto [cos, sin] = Rope(kT, kHeadDim);
  const torch::Tensor x = torch::randn({2, kT, kD});
  const std::shared_ptr<ThinBlockImpl> thin = stage->blocks->ptr<ThinBlockImpl>(0);
  EXPECT_GT(thin->forward(x, cos, sin).abs().max().item<double>(), 1e-4);
  // Zero the residual branches' outputs: Block(z) = z, so Eq. 1 gives up(z − z) = 0.
  for (auto& p : thin->block->named_parameters()) {
    if (p.key().find("proj.weight") != std::string::npos ||
        p.key().find("w2.weight") != std::string::npos) {
      p.value().zero_();
    }
  }
  EXPECT_EQ(thin->forward(x, cos, sin).abs().max().item<double>(), 0.0);
}

TEST(MolStage, EachTokenKeepsItsTopKSoftmaxWeightsUnrenormalised) {
  MolStage stage = MakeStage(6, 1, 2, 2);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({3, kT, kD});
  auto [indices, weights] = stage->Route(x);
  ASSERT_EQ(indices.sizes(), torch::IntArrayRef({3, kT, 2}));
  const torch::Tensor probs = torch::softmax(stage->router(x), -1);  // over the 5 routed blocks
  EXPECT_TRUE(torch::allclose(weights, probs.gather(-1, indices)));
  // The k kept are the k largest, distinct, and their sum stays below 1.
  EXPECT_TRUE(torch::allclose(weights.select(-1, 1), std::get<0>(probs.topk(2, -1)).select(-1, 1)));
  EXPECT_TRUE((indices.select(-1, 0) != indices.select(-1, 1)).all().item<bool>());
  EXPECT_LT(weights.sum(-1).max().item<double>(), 1.0);
  EXPECT_GT(weights.sum(-1).min().item<double>(), 0.0);
}

// Restricted routing: a routed block computes on its own tokens only, so its
// output there does not move when the other tokens change, and differs from the
// same block run over the whole sequence.
TEST(MolStage, ARoutedBlockSeesOnlyTheTokensRoutedToIt) {
  for (MolMixer mixer : {MolMixer::kDeltaNet, MolMixer::kSoftmax}) {
    MolStage stage = MakeStage(4, 1, 1, 3, mixer);
    torch::NoGradGuard no_grad;
    auto [cos, sin] = Rope(kT, kHeadDim);
    torch::manual_seed(4);
    const torch::Tensor x = torch::randn({2, kT, kD});
    const torch::Tensor chosen = torch::rand({2, kT}) < 0.4;
    const torch::Tensor mine = stage->RoutedBlockOutput(1, x, chosen, cos, sin);
    const torch::Tensor others =
        x + 3.0 * torch::randn_like(x) * chosen.logical_not().unsqueeze(-1);
    const torch::Tensor after = stage->RoutedBlockOutput(1, others, chosen, cos, sin);
    const torch::Tensor at = chosen.unsqueeze(-1);
    EXPECT_LT(((mine - after) * at).abs().max().item<double>(), 1e-6);
    EXPECT_EQ((mine * at.logical_not()).abs().max().item<double>(), 0.0);
    const torch::Tensor everyone =
        stage->RoutedBlockOutput(1, x, torch::ones_like(chosen), cos, sin);
    EXPECT_GT(((mine - everyone) * at).abs().max().item<double>(), 1e-4);
  }
}

TEST(MolStage, OutputsAtOrBeforeAPositionIgnoreLaterTokensAndTheLoadIsRecorded) {
  MolStage stage = MakeStage(5, 1, 2, 5);
  torch::NoGradGuard no_grad;
  auto [cos, sin] = Rope(kT, kHeadDim);
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({2, kT, kD});
  const int64_t t = 17;
  torch::Tensor changed = x.clone();
  changed.narrow(1, t + 1, kT - t - 1).add_(torch::randn({2, kT - t - 1, kD}));
  LayerPass a(cos, sin, Routing::kTopK, x), b(cos, sin, Routing::kTopK, x);
  const torch::Tensor ya = stage->forward(x, a), yb = stage->forward(changed, b);
  EXPECT_LT((ya.narrow(1, 0, t + 1) - yb.narrow(1, 0, t + 1)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((ya.narrow(1, t + 1, 1) - yb.narrow(1, t + 1, 1)).abs().max().item<double>(), 1e-5);
  // Every token ran through k = 2 routed blocks.
  ASSERT_EQ(a.aux.Get(kMolBlockLoad).size(), 1u);
  EXPECT_EQ(a.aux.Get(kMolBlockLoad)[0].sum().item<double>(), 2.0 * 2 * kT);
  ASSERT_EQ(a.aux.Get(kMolBalanceLoss).size(), 1u);
  EXPECT_GE(a.aux.Get(kMolBalanceLoss)[0].item<double>(), 0.0);
}

TEST(MolStage, TheRouterAndEveryBlockLearnFromTheOutput) {
  MolStage stage = MakeStage(4, 1, 2, 7);
  auto [cos, sin] = Rope(kT, kHeadDim);
  torch::manual_seed(8);
  const torch::Tensor x = torch::randn({2, kT, kD});
  LayerPass pass(cos, sin, Routing::kTopK, x);
  const torch::Tensor y = stage->forward(x, pass);
  ((y * torch::randn_like(y)).sum() + pass.aux.Get(kMolBalanceLoss)[0]).backward();
  EXPECT_GT(stage->router->weight.grad().abs().max().item<double>(), 0.0);
  for (const auto& p : stage->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
  }
  // A stage that routes to more blocks than it has is refused.
  EXPECT_THROW(MolStage(MolStageOptions(kD, kThin, kHeadDim, 3, 1, 3)), c10::Error);
  EXPECT_THROW(MolStage(MolStageOptions(kD, 24, kHeadDim, 3, 1, 1)), c10::Error);
}

}  // namespace
}  // namespace xmod
