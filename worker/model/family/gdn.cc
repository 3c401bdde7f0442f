// gdn: the dense decoder with Gated DeltaNet as its token mixer; in a hybrid
// every softmax_every-th layer keeps softmax attention (IsSoftmaxLayer).
#include "worker/model/family/families.h"
#include "worker/model/gated_deltanet.h"

namespace xmod::family {

std::shared_ptr<LayerImpl> GdnLayer(const DecoderOptions& o, int64_t index) {
  ModelShape shape;
  shape.family = Family::kGdn;
  shape.softmax_every = o.softmax_every();
  if (IsSoftmaxLayer(shape, index)) return DenseLayer(o, index);
  GatedDeltaNet mixer(GatedDeltaNetOptions(o.d_model(), o.n_heads()));
  Mlp mlp(o.d_model(), o.d_ff());
  return std::make_shared<LayerImpl>(Block(o.d_model(), mixer.ptr(), mlp.ptr()), false);
}

void GdnConfigure(const JobFile& job, DecoderOptions* o) {
  o->softmax_every(job.shape.softmax_every);
}

}  // namespace xmod::family
