#include "worker/model/layer.h"

namespace xmod {

LayerImpl::LayerImpl(Block block_module, bool recompute) : recompute_(recompute) {
  block = register_module("block", std::move(block_module));
}

torch::Tensor LayerImpl::Delta(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& allowed,
                               AuxRecord* aux) {
  return recompute_ ? RecomputedDelta(*block, x, cos, sin, allowed)
                    : block->Delta(x, cos, sin, allowed, aux);
}

torch::Tensor LayerImpl::forward(const torch::Tensor& x, LayerPass& pass) {
  const torch::Tensor out = x + Delta(x, pass.cos, pass.sin, {}, &pass.aux);
  pass.layers_used = pass.layers_used + 1.0;
  return out;
}

}  // namespace xmod
