// Depth routing (X-MoD and MoD): a layer whose router chooses the tokens its
// block processes, and the objective that trains the routers.
//
// A routed layer really shrinks: in top-k mode its block runs on the gathered
// [B, k, d] tokens. The router, the routing decision and its loss are an fp32
// island of a bf16 autocast region, so that near-ties break as in fp32.
#ifndef XMOD_WORKER_MODEL_ROUTED_LAYER_H_
#define XMOD_WORKER_MODEL_ROUTED_LAYER_H_

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "worker/model/aux.h"
#include "worker/model/layer.h"
#include "worker/model/precision.h"

namespace xmod {

struct RoutedLayerOptions {
  RoutedLayerOptions(int64_t d_model, int64_t routed_tokens, int64_t context)
      : d_model_(d_model), routed_tokens_(routed_tokens), context_(context) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, routed_tokens);  // k per sequence of `context` tokens
  TORCH_ARG(int64_t, context);
  // X-MoD: a learned γ (init 1) scales the gate to γ · gate_scale · sigmoid(r);
  // MoD: the gate is sigmoid(r).
  TORCH_ARG(bool, gamma) = false;
  TORCH_ARG(double, gate_scale) = 1.0;
  TORCH_ARG(bool, recompute) = false;
};

// k for a sequence of t tokens: a sequence shorter than the context keeps the
// trained capacity ρ = k / context (at least one token).
int64_t RoutedTokensAt(int64_t routed_tokens, int64_t context, int64_t t);

// Submodules: block, router (d -> 1, no bias); parameter gamma (X-MoD only).
// Top-k mode: the k tokens of each sequence with the largest router logits r, in
// position order, pass through the block; its output is scattered back scaled by
// the gate. Threshold mode: each token with r > 0 does, seeing the chosen tokens
// up to itself. Records, per forward, the router's probabilities sigmoid(r)
// ("router_probs") and its causal BCE loss against the choice ("router_loss").
class RoutedLayerImpl : public LayerImpl {
 public:
  RoutedLayerImpl(Block block, const RoutedLayerOptions& options);
  torch::Tensor forward(const torch::Tensor& x, LayerPass& pass) override;
  bool routed() const override { return true; }
  void InitWeights(const InitScales& scales) override;

  torch::nn::Linear router{nullptr};
  torch::Tensor gamma;  // undefined unless options.gamma

 private:
  using Fp32Island = std::optional<AutocastOff>;
  // After the router: the layer's output in each mode. Each ends `fp32` once the
  // routing loss is taken.
  torch::Tensor TopK(const torch::Tensor& x, const torch::Tensor& r, const torch::Tensor& gate,
                     Fp32Island& fp32, LayerPass& pass);
  torch::Tensor Threshold(const torch::Tensor& x, const torch::Tensor& r, const torch::Tensor& gate,
                          Fp32Island& fp32, LayerPass& pass);

  RoutedLayerOptions options_;
};
TORCH_MODULE(RoutedLayer);

// The routers' objective: router_loss, the mean over routed layers of their BCE
// losses (weight router_coef); balance_loss, X-MoD's depth-wise balancing loss
// (u − ρ)² / (ρ(1 − ρ)) averaged over tokens, u a token's mean router probability
// over the routed layers (weight balance_coef; 0 for MoD or at ρ = 1); and
// depth_fraction, the mean fraction of layers a token passes through. Reports
// the three in that order.
class DepthRoutingObjective : public AuxObjective {
 public:
  DepthRoutingObjective(int64_t routed_tokens, int64_t context, bool balance, double balance_coef,
                        double router_coef);
  void Collect(const AuxRecord& record, std::vector<AuxValue>* values) const override;
  void AfterStep(const StepTally& tally, std::vector<NamedValue>* report) override;

 private:
  int64_t routed_tokens_, context_;
  bool balance_;
  double balance_coef_, router_coef_;
};

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_ROUTED_LAYER_H_
