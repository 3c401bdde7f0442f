// mod: Mixture-of-Depths, stride 2: routed layers gated by sigmoid(r) alone,
// routers trained with the causal BCE loss only (no balancing loss).
#include "worker/model/family/families.h"
#include "worker/model/routed_layer.h"

namespace xmod::family {

std::shared_ptr<LayerImpl> ModLayer(const DecoderOptions& o, int64_t index) {
  if (!IsRoutedLayer(o, index)) return DenseLayer(o, index);
  return std::make_shared<RoutedLayerImpl>(
      DenseBlock(o),
      RoutedLayerOptions(o.d_model(), o.routed_tokens(), o.context()).recompute(o.recompute()));
}

Objectives ModObjectives(const DecoderOptions& o, DecoderImpl& /*model*/) {
  return {std::make_shared<DepthRoutingObjective>(o.routed_tokens(), o.context(),
                                                  /*balance=*/false, o.balance_coef(),
                                                  o.router_coef())};
}

}  // namespace xmod::family
