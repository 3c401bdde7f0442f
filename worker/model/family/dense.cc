// dense: every layer is the plain pre-norm block, attention then SwiGLU.
#include "worker/model/family/families.h"

namespace xmod::family {

Block DenseBlock(const DecoderOptions& o) {
  Attention attention(o.d_model(), o.n_heads());
  Mlp mlp(o.d_model(), o.d_ff());
  return Block(o.d_model(), attention.ptr(), mlp.ptr());
}

std::shared_ptr<LayerImpl> DenseLayer(const DecoderOptions& o, int64_t /*index*/) {
  return std::make_shared<LayerImpl>(DenseBlock(o), o.recompute());
}

double LayerCountDepth(const DecoderOptions& o) { return static_cast<double>(o.n_layers()); }

Objectives NoObjectives(const DecoderOptions& /*options*/, DecoderImpl& /*model*/) { return {}; }

}  // namespace xmod::family
