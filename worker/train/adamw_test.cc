#include "worker/train/adamw.h"

#include <gtest/gtest.h>

#include <vector>

namespace xmod {
namespace {

// Largest |a − b| over the largest |b| (a moment near zero differs by rounding
// relative to the tensor's scale, not its own).
double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
}

// Two groups (with and without weight decay), a parameter that gets no gradient
// on some steps, several steps: the fused step and LibTorch's leave the same
// parameters, moments and step counts.
TEST(AdamW, FusedStepMatchesLibTorchsAdamWOverGroupsStepsAndSkippedParameters) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> init = {torch::randn({64, 33}), torch::randn({130}),
                                     torch::randn({7, 5})};
  std::vector<torch::Tensor> params[2];
  std::unique_ptr<torch::optim::AdamW> opt[2];
  for (int fused = 0; fused < 2; ++fused) {
    for (const auto& t : init) params[fused].push_back(t.clone().requires_grad_(true));
    auto base = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{params[fused][0], params[fused][2]},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(base).weight_decay(0.1)));
    groups.emplace_back(std::vector<torch::Tensor>{params[fused][1]},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(base).weight_decay(0.0)));
    opt[fused] = std::make_unique<torch::optim::AdamW>(std::move(groups), base);
  }
  for (int step = 0; step < 6; ++step) {
    torch::manual_seed(100 + step);
    std::vector<torch::Tensor> grads;
    for (const auto& t : init) grads.push_back(torch::randn_like(t) * (step + 1));
    for (int fused = 0; fused < 2; ++fused) {
      for (size_t i = 0; i < grads.size(); ++i) {
        // The last parameter has no gradient on odd steps: skipped, its step count behind.
        params[fused][i].mutable_grad() =
            (i == 2 && step % 2 == 1) ? torch::Tensor() : grads[i].clone();
      }
      SetFusedAdamW(fused == 1);
      AdamWStep(*opt[fused]);
    }
  }
  SetFusedAdamW(true);
  for (size_t i = 0; i < init.size(); ++i) {
    const torch::Tensor& a = params[1][i];
    const torch::Tensor& b = params[0][i];
    EXPECT_FALSE(torch::equal(a, init[i])) << "parameter " << i << " did not move";
    EXPECT_LT(RelativeError(a, b), 1e-6) << "parameter " << i;
    torch::optim::AdamWParamState* sa = AdamWStateOf(*opt[1], a);
    torch::optim::AdamWParamState* sb = AdamWStateOf(*opt[0], b);
    ASSERT_NE(sa, nullptr);
    ASSERT_NE(sb, nullptr);
    EXPECT_EQ(sa->step(), sb->step()) << "parameter " << i;
    EXPECT_EQ(sa->step(), i == 2 ? 3 : 6);
    EXPECT_LT(RelativeError(sa->exp_avg(), sb->exp_avg()), 1e-6) << "parameter " << i;
    EXPECT_LT(RelativeError(sa->exp_avg_sq(), sb->exp_avg_sq()), 1e-6) << "parameter " << i;
  }
}

TEST(AdamW, NonFloatParametersTakeLibTorchsStep) {
  torch::Tensor p = torch::ones({4}, torch::kFloat64).requires_grad_(true);
  torch::optim::AdamW opt({p}, torch::optim::AdamWOptions(0.1).weight_decay(0.0));
  p.mutable_grad() = torch::ones({4}, torch::kFloat64);
  AdamWStep(opt);
  // Adam's first step moves every element by lr (sign of the gradient).
  EXPECT_TRUE(torch::allclose(p, torch::full({4}, 0.9, torch::kFloat64), 0, 1e-6));
  EXPECT_EQ(AdamWStateOf(opt, p)->step(), 1);
}

}  // namespace
}  // namespace xmod
