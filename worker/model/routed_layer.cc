#include "worker/model/routed_layer.h"

#include <algorithm>
#include <cmath>

namespace xmod {

namespace F = torch::nn::functional;

namespace {
constexpr std::string_view kRouterProbs = "router_probs";
constexpr std::string_view kRouterLoss = "router_loss";
}  // namespace

int64_t RoutedTokensAt(int64_t routed_tokens, int64_t context, int64_t t) {
  return std::max<int64_t>(1,
                           std::min<int64_t>(t, std::llround(double(routed_tokens) * t / context)));
}

RoutedLayerImpl::RoutedLayerImpl(Block block_module, const RoutedLayerOptions& o)
    : LayerImpl(std::move(block_module), o.recompute()), options_(o) {
  router = register_module("router",
                           torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), 1).bias(false)));
  if (o.gamma()) gamma = register_parameter("gamma", torch::ones({1}));
}

void RoutedLayerImpl::InitWeights(const InitScales& scales) {
  // named_parameters() order: this module's gamma, then block, then router.
  if (gamma.defined()) gamma.fill_(1.0);
  block->InitWeights(scales);
  router->weight.normal_(0.0, scales.std);
}

torch::Tensor RoutedLayerImpl::forward(const torch::Tensor& x, LayerPass& pass) {
  Fp32Island fp32(std::in_place, x.device());
  const torch::Tensor r = router(x.to(torch::kFloat32)).squeeze(-1);  // [B, T], fp32
  const torch::Tensor gate =
      gamma.defined() ? gamma * options_.gate_scale() : torch::ones({1}, x.options());
  pass.aux.Add(kRouterProbs, torch::sigmoid(r));
  pass.router_logits.push_back(r.detach());
  return pass.routing == Routing::kTopK ? TopK(x, r, gate, fp32, pass)
                                        : Threshold(x, r, gate, fp32, pass);
}

torch::Tensor RoutedLayerImpl::TopK(const torch::Tensor& x, const torch::Tensor& r,
                                    const torch::Tensor& gate, Fp32Island& fp32, LayerPass& pass) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const int64_t k = RoutedTokensAt(options_.routed_tokens(), options_.context(), t);
  const int64_t half = pass.cos.size(-1);
  // Top-k per sequence, re-sorted by position so that causal order is kept.
  const torch::Tensor idx = std::get<0>(std::get<1>(r.topk(k, -1)).sort(-1));  // [B, k]
  const torch::Tensor weight = torch::sigmoid(r.gather(1, idx)) * gate;        // [B, k]
  const torch::Tensor chosen = torch::zeros({b, t}, r.options()).scatter(1, idx, 1.0);
  pass.aux.Add(kRouterLoss, F::binary_cross_entropy_with_logits(r, chosen));
  fp32.reset();
  const torch::Tensor idx_d = idx.unsqueeze(-1).expand({b, k, d});
  const torch::Tensor x_sel = x.gather(1, idx_d);  // [B, k, d]
  const torch::Tensor flat = idx.reshape({-1});
  const torch::Tensor cos_sel = pass.cos[0].index_select(0, flat).view({b, k, half});
  const torch::Tensor sin_sel = pass.sin[0].index_select(0, flat).view({b, k, half});
  const torch::Tensor delta = Delta(x_sel, cos_sel, sin_sel, {}, &pass.aux);  // [B, k, d]
  const torch::Tensor out = x.scatter_add(1, idx_d, weight.unsqueeze(-1).to(x.dtype()) * delta);
  pass.layers_used = pass.layers_used + chosen;
  pass.routed_counts.push_back(
      torch::full({}, double(b * k), torch::dtype(torch::kFloat64).device(x.device())));
  return out;
}

torch::Tensor RoutedLayerImpl::Threshold(const torch::Tensor& x, const torch::Tensor& r,
                                         const torch::Tensor& gate, Fp32Island& fp32,
                                         LayerPass& pass) {
  const int64_t t = x.size(1);
  // Each token decides alone (r > 0): keys are the chosen tokens up to the query
  // (plus itself, so that an unchosen query has a defined, discarded output).
  const torch::Tensor chosen = r > 0;                                            // [B, T]
  const torch::Tensor weight = torch::sigmoid(r) * gate * chosen.to(r.dtype());  // [B, T]
  pass.aux.Add(kRouterLoss, F::binary_cross_entropy_with_logits(r, chosen.to(r.dtype())));
  fp32.reset();
  if (!pass.causal.defined()) {
    pass.causal = torch::ones({t, t}, torch::dtype(torch::kBool).device(x.device())).tril();
  }
  const torch::Tensor eye = torch::eye(t, torch::dtype(torch::kBool).device(x.device()));
  const torch::Tensor allowed =
      (pass.causal & chosen.unsqueeze(1)).logical_or(eye).unsqueeze(1);  // [B, 1, T, T]
  const torch::Tensor delta = Delta(x, pass.cos, pass.sin, allowed, &pass.aux);
  const torch::Tensor out = x + weight.unsqueeze(-1).to(x.dtype()) * delta;
  pass.layers_used = pass.layers_used + chosen.to(x.dtype());
  pass.routed_counts.push_back(chosen.sum().to(torch::kFloat64));
  return out;
}

DepthRoutingObjective::DepthRoutingObjective(int64_t routed_tokens, int64_t context, bool balance,
                                             double balance_coef, double router_coef)
    : routed_tokens_(routed_tokens),
      context_(context),
      balance_(balance),
      balance_coef_(balance_coef),
      router_coef_(router_coef) {}

void DepthRoutingObjective::Collect(const AuxRecord& record, std::vector<AuxValue>* values) const {
  const std::vector<torch::Tensor>& losses = record.Get(kRouterLoss);
  torch::Tensor router_loss = record.Zero();
  for (const torch::Tensor& l : losses) router_loss = router_loss + l;
  if (!losses.empty()) router_loss = router_loss / double(losses.size());
  torch::Tensor balance = record.Zero();
  const std::vector<torch::Tensor>& probs = record.Get(kRouterProbs);
  if (balance_ && !probs.empty()) {
    const int64_t t = probs[0].size(1);
    const double rho = double(RoutedTokensAt(routed_tokens_, context_, t)) / double(t);
    if (rho < 1.0) {
      const torch::Tensor u = torch::stack(probs).mean(0);  // [B, T]
      balance = (u - rho).pow(2).mean() / (rho * (1.0 - rho));
    }
  }
  values->push_back({"balance_loss", balance, AuxKind::kLoss, balance_coef_});
  values->push_back({"router_loss", router_loss, AuxKind::kLoss, router_coef_});
  values->push_back({"depth_fraction", record.Get(kDepthFraction).at(0), AuxKind::kMean});
}

void DepthRoutingObjective::AfterStep(const StepTally& tally, std::vector<NamedValue>* report) {
  for (const char* name : {"balance_loss", "router_loss", "depth_fraction"}) {
    report->push_back({name, tally.Scalar(name)});
  }
}

}  // namespace xmod
