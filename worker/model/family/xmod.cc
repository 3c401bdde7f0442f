// xmod: an anchor (dense) layer every `stride` layers and routed layers between
// them, each gated by γ · sigmoid(r) / sqrt(stride − 1); the routers train with
// the causal BCE loss and the depth-wise balancing loss.
#include <cmath>

#include "worker/model/family/families.h"
#include "worker/model/routed_layer.h"

namespace xmod::family {

bool IsRoutedLayer(const DecoderOptions& o, int64_t index) {
  return o.stride() > 1 && !IsAnchorLayer(index, o.stride());
}

std::shared_ptr<LayerImpl> XmodLayer(const DecoderOptions& o, int64_t index) {
  if (!IsRoutedLayer(o, index)) return DenseLayer(o, index);
  return std::make_shared<RoutedLayerImpl>(
      DenseBlock(o), RoutedLayerOptions(o.d_model(), o.routed_tokens(), o.context())
                         .gamma(true)
                         .gate_scale(1.0 / std::sqrt(static_cast<double>(o.stride() - 1)))
                         .recompute(o.recompute()));
}

// The s − 1 routed layers between two anchors, whose outputs are gated by
// γ / sqrt(s − 1), count 1 together; each anchor counts 1 (InitDepth, model.h).
double XmodInitDepth(const DecoderOptions& o) {
  int64_t anchors = 0, routed = 0;
  for (int64_t l = 0; l < o.n_layers(); ++l) (IsRoutedLayer(o, l) ? routed : anchors) += 1;
  if (routed == 0) return static_cast<double>(o.n_layers());
  return static_cast<double>(anchors) +
         static_cast<double>(routed) / static_cast<double>(o.stride() - 1);
}

Objectives XmodObjectives(const DecoderOptions& o, DecoderImpl& /*model*/) {
  return {std::make_shared<DepthRoutingObjective>(o.routed_tokens(), o.context(),
                                                  /*balance=*/true, o.balance_coef(),
                                                  o.router_coef())};
}

}  // namespace xmod::family
