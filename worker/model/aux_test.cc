#include "worker/model/aux.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/model/expert_aux.h"
#include "worker/model/family/family.h"
#include "worker/model/model.h"

namespace xmod {
namespace {

TEST(AuxRecord, KeepsEachNameInLayerOrderAndAnEmptyListForUnknownNames) {
  AuxRecord record(torch::dtype(torch::kFloat32));
  record.Add("a", torch::full({}, 1.0));
  record.Add("b", torch::full({}, 2.0));
  record.Add("a", torch::full({}, 3.0));
  ASSERT_EQ(record.Get("a").size(), 2u);
  EXPECT_EQ(record.Get("a")[1].item<double>(), 3.0);
  EXPECT_TRUE(record.Get("c").empty());
  EXPECT_EQ(record.Zero().scalar_type(), torch::kFloat32);
}

TEST(StepTally, WeighsMeansByShareAndSumsCountsAsTheyAre) {
  StepTally tally(torch::kCPU);
  for (double share : {0.25, 0.75}) {
    tally.Add({AuxValue{"loss", torch::full({}, 2.0), AuxKind::kLoss, 0.5},
               AuxValue{"mean", torch::full({}, 4.0)},
               AuxValue{"count", torch::full({2}, 3.0), AuxKind::kCount}},
              share);
  }
  EXPECT_DOUBLE_EQ(tally.Scalar("loss"), 2.0);  // the weight is the loss's, not the tally's
  EXPECT_DOUBLE_EQ(tally.Scalar("mean"), 4.0);
  EXPECT_TRUE(torch::equal(tally.Get("count"), torch::full({2}, 6.0, torch::kFloat64)));
  EXPECT_EQ(tally.Scalar("absent"), 0.0);
  EXPECT_FALSE(tally.Get("absent").defined());
  // The sums in first-added order, sharing storage: reducing them reduces the tally.
  std::vector<torch::Tensor> sums = tally.tensors();
  ASSERT_EQ(sums.size(), 3u);
  sums[1].mul_(2.0);
  EXPECT_DOUBLE_EQ(tally.Scalar("mean"), 8.0);
}

DecoderOptions Options(Family family) {
  ExpertShape e;
  if (family == Family::kMoe) e = ExpertShape{4, 2, 16, 0, 0, 0, 0.0};
  if (family == Family::kDeco) e = ExpertShape{4, 0, 8, 0, 16, 1, 0.2};
  return DecoderOptions(32, 16, 2, 4, DefaultDff(16), 8)
      .family(family)
      .stride(family == Family::kXmod || family == Family::kMod ? 2 : 1)
      .routed_tokens(4)
      .balance_coef(0.01)
      .router_coef(0.01)
      .experts(e)
      .z_coef(1e-3)
      .entropy_init(1e-4)
      .entropy_multiplier(1.05);
}

// The names the trainer reports after train_loss, lr, grad_norm and tokens_per_s
// (docs/metrics.md): the dashboard and the tests read them, so they never move.
TEST(Aux, EachFamilyReportsItsMetricNamesInOrder) {
  const std::vector<std::pair<Family, std::vector<std::string>>> expected = {
      {Family::kDense, {}},
      {Family::kXmod, {"balance_loss", "router_loss", "depth_fraction"}},
      {Family::kMod, {"balance_loss", "router_loss", "depth_fraction"}},
      {Family::kMoe, {"balance_loss", "z_loss", "dropped_fraction", "expert_load_spread"}},
      {Family::kDeco, {"router_entropy", "entropy_coef", "activation_ratio", "expert_load_spread"}},
  };
  for (const auto& [family, names] : expected) {
    torch::manual_seed(1);
    Decoder model(Options(family));
    const DecoderOutput out = model->forward(torch::randint(0, 32, {2, 8}));
    StepTally tally(torch::kCPU);
    tally.Add(out.aux, 1.0);
    std::vector<std::string> reported;
    for (const NamedValue& v : model->AfterStep(tally)) reported.push_back(v.name);
    EXPECT_EQ(reported, names) << FamilyName(family);
  }
}

// aux_loss is the weighted sum of the named losses, in order.
TEST(Aux, AuxLossIsTheWeightedSumOfTheNamedLosses) {
  for (Family family : {Family::kDense, Family::kXmod, Family::kMod, Family::kMoe, Family::kDeco}) {
    torch::manual_seed(2);
    Decoder model(Options(family));
    const DecoderOutput out = model->forward(torch::randint(0, 32, {2, 8}));
    torch::Tensor sum = torch::zeros({});
    for (const AuxValue& v : out.aux) {
      if (v.kind == AuxKind::kLoss) sum = sum + v.weight * v.value;
    }
    EXPECT_EQ(out.aux_loss.item<double>(), sum.item<double>()) << FamilyName(family);
  }
  torch::manual_seed(2);
  Decoder moe(Options(Family::kMoe));
  const DecoderOutput out = moe->forward(torch::randint(0, 32, {2, 8}));
  EXPECT_GT(out.Aux("z_loss").item<double>(), 0.0);
  EXPECT_FALSE(out.Aux("router_loss").defined());
}

TEST(Aux, MoeBiasBalancingRunsAfterTheStepOnlyWithAPositiveRate) {
  for (double rate : {0.0, 1e-2}) {
    torch::manual_seed(3);
    Decoder model(Options(Family::kMoe).bias_rate(rate));
    StepTally tally(torch::kCPU);
    tally.Add(model->forward(torch::randint(0, 32, {2, 8})).aux, 1.0);
    model->AfterStep(tally);
    const torch::Tensor bias = model->named_buffers()["layers.0.block.mlp.bias"];
    EXPECT_EQ(bias.abs().sum().item<double>() > 0.0, rate > 0.0) << rate;
  }
}

TEST(Aux, DecoReportsTheCoefficientItTrainedWithAndThenMovesIt) {
  Decoder model(Options(Family::kDeco));
  StepTally tally(torch::kCPU);
  tally.Add(AuxValue{"positive", torch::full({}, 3.0), AuxKind::kCount}, 1.0);
  tally.Add(AuxValue{"score_slots", torch::full({}, 4.0), AuxKind::kCount}, 1.0);
  const std::vector<NamedValue> report = model->AfterStep(tally);
  ASSERT_EQ(report.size(), 4u);
  EXPECT_EQ(report[1].value, 1e-4);  // entropy_coef, before the controller's move
  EXPECT_EQ(report[2].value, 0.75);  // activation_ratio, above the target 0.2
  EXPECT_DOUBLE_EQ(model->objective<DecoObjective>()->entropy_coef(), 1e-4 * 1.05);
}

TEST(ModelFamilies, EveryFamilyHasARowAndOnlyDepthRoutingEvaluatesCausally) {
  for (Family family : {Family::kDense, Family::kXmod, Family::kMod, Family::kMoe, Family::kDeco}) {
    const ModelFamily& row = ModelFamilyOf(family);
    EXPECT_EQ(row.id, family);
    EXPECT_EQ(row.causal_eval, family == Family::kXmod || family == Family::kMod)
        << FamilyName(family);
    EXPECT_EQ(row.recompute, !IsExpertFamily(family)) << FamilyName(family);
  }
}

}  // namespace
}  // namespace xmod
