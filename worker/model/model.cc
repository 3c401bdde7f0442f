#include "worker/model/model.h"

#include <cmath>

#include "worker/model/family/family.h"
#include "worker/model/precision.h"

namespace xmod {

torch::Tensor DecoderOutput::Aux(std::string_view name) const {
  for (const AuxValue& v : aux) {
    if (v.name == name) return v.value;
  }
  return torch::Tensor();
}

DecoderImpl::DecoderImpl(DecoderOptions options)
    : options_(std::move(options)), family_(&ModelFamilyOf(options_.family())) {
  const auto& o = options_;
  TORCH_CHECK(!o.recompute() || family_->recompute, "recompute is not available for ",
              FamilyName(o.family()),
              ": its blocks record losses, which a recomputed block could not differentiate");
  tok_emb = register_module("tok_emb", torch::nn::Embedding(o.vocab_size(), o.d_model()));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < o.n_layers(); ++l) {
    layer_list_.push_back(family_->build_layer(o, l));
    layers->push_back(layer_list_.back());
  }
  norm = register_module("norm", RMSNorm(o.d_model()));
  head = register_module(
      "head", torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), o.vocab_size()).bias(false)));
  const int64_t half = o.d_model() / o.n_heads() / 2;
  const torch::Tensor inv_freq =
      torch::pow(o.rope_theta(), -torch::arange(half, torch::kFloat64) / double(half));
  const torch::Tensor angles =
      torch::outer(torch::arange(o.context(), torch::kFloat64), inv_freq);  // [T, half]
  rope_cos_ = register_buffer("rope_cos", angles.cos().to(torch::kFloat32));
  rope_sin_ = register_buffer("rope_sin", angles.sin().to(torch::kFloat32));
  objectives_ = family_->objectives(o, *this);
  reset_parameters();
}

double InitDepth(const DecoderOptions& o) { return ModelFamilyOf(o.family()).init_depth(o); }

void DecoderImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  InitScales scales;
  scales.std = options_.init_std();
  scales.out_std = scales.std / std::sqrt(2.0 * InitDepth(options_));
  // In named_parameters() order, as every InitWeights draws.
  tok_emb->weight.normal_(0.0, scales.std);
  for (const auto& layer : layer_list_) layer->InitWeights(scales);
  norm->InitWeights();
  head->weight.normal_(0.0, scales.std);
}

DecoderOutput DecoderImpl::forward(const torch::Tensor& tokens, Routing routing) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= options_.context(), "sequence of ", t, " tokens exceeds the context ",
              options_.context());
  torch::Tensor x = tok_emb(tokens);
  LayerPass pass(rope_cos_.narrow(0, 0, t).unsqueeze(0),  // [1, T, half]
                 rope_sin_.narrow(0, 0, t).unsqueeze(0), routing, x);
  for (const auto& layer : layer_list_) x = layer->forward(x, pass);
  DecoderOutput out;
  out.hidden = x;
  out.logits = head(norm(x));
  Finish(pass, &out);
  return out;
}

void DecoderImpl::Finish(LayerPass& pass, DecoderOutput* out) const {
  const torch::Device device = out->hidden.device();
  out->router_logits = std::move(pass.router_logits);
  AutocastOff fp32_losses(device);
  out->routed_counts = pass.routed_counts.empty()
                           ? torch::zeros({0}, torch::dtype(torch::kFloat64).device(device))
                           : torch::stack(pass.routed_counts);
  out->depth_fraction = (pass.layers_used / double(options_.n_layers())).mean().detach();
  pass.aux.Add(kDepthFraction, out->depth_fraction);
  for (const auto& objective : objectives_) objective->Collect(pass.aux, &out->aux);
  for (const AuxValue& v : out->aux) {
    if (v.kind != AuxKind::kLoss) continue;
    const torch::Tensor term = v.weight * v.value;
    out->aux_loss = out->aux_loss.defined() ? out->aux_loss + term : term;
  }
  if (!out->aux_loss.defined()) out->aux_loss = pass.aux.Zero();
}

std::vector<NamedValue> DecoderImpl::AfterStep(const StepTally& tally) {
  std::vector<NamedValue> report;
  for (const auto& objective : objectives_) objective->AfterStep(tally, &report);
  return report;
}

int64_t CountModuleParameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace xmod
