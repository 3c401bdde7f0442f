// The auxiliary objectives of the expert layers (aux.h, experts.h): top-k MoE's
// balancing and z losses, dispatch statistics and aux-loss-free bias balancing;
// DECO's entropy penalty, activation ratio and adaptive entropy coefficient.
#ifndef XMOD_WORKER_MODEL_EXPERT_AUX_H_
#define XMOD_WORKER_MODEL_EXPERT_AUX_H_

#include <torch/torch.h>

#include <vector>

#include "worker/model/aux.h"
#include "worker/model/experts.h"

namespace xmod {

// Mean over the expert layers of max_e load / mean_e load, for `load` [layers, E]
// summed over a step; 0 when undefined (no expert layers).
double ExpertLoadSpread(const torch::Tensor& load);

// moe. Values: balance_loss and z_loss, each the mean over the expert layers
// (weights balance_coef and z_coef); counts dropped, assignments (before
// dropping), routed [layers, E] and load [layers, E]. Reports balance_loss,
// z_loss, dropped_fraction and expert_load_spread; after each step, with
// bias_rate > 0, moves every layer's selection bias against the step's routed
// counts (MoeMlpImpl::UpdateBias).
class MoeObjective : public AuxObjective {
 public:
  // `layers`: the model's MoE layers, in layer order.
  MoeObjective(std::vector<MoeMlp> layers, double balance_coef, double z_coef, double bias_rate);
  void Collect(const AuxRecord& record, std::vector<AuxValue>* values) const override;
  void AfterStep(const StepTally& tally, std::vector<NamedValue>* report) override;

 private:
  std::vector<MoeMlp> layers_;
  double balance_coef_, z_coef_, bias_rate_;
};

// deco. Values: router_entropy, Σ over expert layers of H / n_layers (DECO's
// (c/L)·H per layer; weight c, the entropy coefficient); counts positive (router
// scores > 0), score_slots (tokens · E) and load [layers, E]. Reports
// router_entropy, entropy_coef (the c the step trained with), activation_ratio
// (positive / score_slots) and expert_load_spread; after each step, runs DECO's
// controller on the activation ratio.
class DecoObjective : public AuxObjective {
 public:
  // Registers c as the float64 buffer "entropy_coef" of `owner` (the decoder),
  // so that checkpoints carry it.
  DecoObjective(torch::nn::Module& owner, int64_t n_layers, double entropy_init,
                double entropy_multiplier, double target_ratio);
  void Collect(const AuxRecord& record, std::vector<AuxValue>* values) const override;
  void AfterStep(const StepTally& tally, std::vector<NamedValue>* report) override;
  double entropy_coef() const { return coef_.item<double>(); }
  // DECO's controller: c ← c·m when the step's activation ratio is above the
  // target, c ← max(c/m, entropy_init) otherwise.
  void UpdateEntropyCoef(double ratio);

 private:
  torch::Tensor coef_;  // [] float64
  int64_t n_layers_;
  double init_, multiplier_, target_;
};

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_EXPERT_AUX_H_
