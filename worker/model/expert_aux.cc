#include "worker/model/expert_aux.h"

#include <algorithm>

namespace xmod {

double ExpertLoadSpread(const torch::Tensor& load) {
  if (!load.defined()) return 0.0;
  const torch::Tensor l = load.cpu();
  const torch::Tensor mean = l.mean(1);
  const torch::Tensor spread = l.amax(1) / mean.clamp_min(1e-12);
  return spread.mean().item<double>();
}

MoeObjective::MoeObjective(std::vector<MoeMlp> layers, double balance_coef, double z_coef,
                           double bias_rate)
    : layers_(std::move(layers)),
      balance_coef_(balance_coef),
      z_coef_(z_coef),
      bias_rate_(bias_rate) {}

void MoeObjective::Collect(const AuxRecord& record, std::vector<AuxValue>* values) const {
  const std::vector<torch::Tensor>& balance = record.Get(kMoeBalanceLoss);
  const std::vector<torch::Tensor>& z = record.Get(kMoeZLoss);
  torch::Tensor balance_loss = record.Zero(), z_loss = record.Zero();
  const double layers = double(balance.size());
  for (size_t i = 0; i < balance.size(); ++i) {
    balance_loss = balance_loss + balance[i] / layers;
    z_loss = z_loss + z[i] / layers;
  }
  values->push_back({"balance_loss", balance_loss, AuxKind::kLoss, balance_coef_});
  values->push_back({"z_loss", z_loss, AuxKind::kLoss, z_coef_});
  const std::vector<torch::Tensor>& routed = record.Get(kMoeRouted);
  if (routed.empty()) return;
  // `dropped` is on the host already, where MoeMlp counted what each expert
  // computed; the other counts stay on the device (no synchronisation per layer).
  double dropped = 0.0;
  for (const torch::Tensor& d : record.Get(kMoeDropped)) dropped += d.item<double>();
  const torch::Tensor r = torch::stack(routed).to(torch::kFloat64);  // [layers, E]
  values->push_back({"dropped", torch::full({}, dropped, torch::kFloat64), AuxKind::kCount});
  values->push_back({"assignments", r.sum(), AuxKind::kCount});
  values->push_back({"routed", r, AuxKind::kCount});
  values->push_back({"load", torch::stack(record.Get(kExpertLoad)), AuxKind::kCount});
}

void MoeObjective::AfterStep(const StepTally& tally, std::vector<NamedValue>* report) {
  const double assignments = tally.Scalar("assignments");
  report->push_back({"balance_loss", tally.Scalar("balance_loss")});
  report->push_back({"z_loss", tally.Scalar("z_loss")});
  report->push_back(
      {"dropped_fraction", assignments > 0 ? tally.Scalar("dropped") / assignments : 0.0});
  report->push_back({"expert_load_spread", ExpertLoadSpread(tally.Get("load"))});
  const torch::Tensor routed = tally.Get("routed");
  if (bias_rate_ > 0 && routed.defined()) {
    TORCH_CHECK(routed.size(0) == static_cast<int64_t>(layers_.size()),
                "expert bias: one row of loads per expert layer");
    for (size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->UpdateBias(routed[int64_t(i)], bias_rate_);
    }
  }
}

DecoObjective::DecoObjective(torch::nn::Module& owner, int64_t n_layers, double entropy_init,
                             double entropy_multiplier, double target_ratio)
    : n_layers_(n_layers),
      init_(entropy_init),
      multiplier_(entropy_multiplier),
      target_(target_ratio) {
  coef_ = owner.register_buffer("entropy_coef", torch::full({}, entropy_init, torch::kFloat64));
}

void DecoObjective::Collect(const AuxRecord& record, std::vector<AuxValue>* values) const {
  torch::Tensor entropy = record.Zero();
  for (const torch::Tensor& h : record.Get(kDecoEntropy)) entropy = entropy + h / double(n_layers_);
  values->push_back({"router_entropy", entropy, AuxKind::kLoss, entropy_coef()});
  const std::vector<torch::Tensor>& load = record.Get(kExpertLoad);
  if (load.empty()) return;
  double slots = 0.0;
  for (const torch::Tensor& s : record.Get(kDecoScoreSlots)) slots += s.item<double>();
  const torch::Tensor l = torch::stack(load);  // [layers, E]
  values->push_back({"positive", l.sum(), AuxKind::kCount});
  values->push_back({"score_slots", torch::full({}, slots, torch::kFloat64), AuxKind::kCount});
  values->push_back({"load", l, AuxKind::kCount});
}

void DecoObjective::AfterStep(const StepTally& tally, std::vector<NamedValue>* report) {
  const double slots = tally.Scalar("score_slots");
  const double ratio = slots > 0 ? tally.Scalar("positive") / slots : 0.0;
  report->push_back({"router_entropy", tally.Scalar("router_entropy")});
  report->push_back({"entropy_coef", entropy_coef()});
  report->push_back({"activation_ratio", ratio});
  report->push_back({"expert_load_spread", ExpertLoadSpread(tally.Get("load"))});
  UpdateEntropyCoef(ratio);
}

void DecoObjective::UpdateEntropyCoef(double ratio) {
  torch::NoGradGuard no_grad;
  const double c = coef_.item<double>();
  const double next = ratio > target_ ? c * multiplier_ : std::max(c / multiplier_, init_);
  coef_.fill_(next);
}

}  // namespace xmod
