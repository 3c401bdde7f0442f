// deco: after the first experts.dense_layers dense layers (DECO: 1), every
// block's channel mixer is DECO's ReLU-routed experts with NormSiLU and a SwiGLU
// shared expert (experts.h, docs/baselines.md).
#include "worker/model/expert_aux.h"
#include "worker/model/family/families.h"

namespace xmod::family {

std::shared_ptr<LayerImpl> DecoLayer(const DecoderOptions& o, int64_t index) {
  const ExpertShape& e = o.experts();
  if (index < e.dense_layers) return DenseLayer(o, index);
  // The experts before the attention: the generator's stream the golden losses pin.
  DecoMlp experts(DecoMlpOptions(o.d_model(), e.experts, e.width, e.shared_width));
  Attention attention(o.d_model(), o.n_heads());
  return std::make_shared<LayerImpl>(Block(o.d_model(), attention.ptr(), experts.ptr()),
                                     o.recompute());
}

Objectives DecoObjectives(const DecoderOptions& o, DecoderImpl& model) {
  return {std::make_shared<DecoObjective>(model, o.n_layers(), o.entropy_init(),
                                          o.entropy_multiplier(), o.experts().target_ratio)};
}

void DecoConfigure(const JobFile& job, DecoderOptions* o) {
  o->experts(job.shape.experts)
      .entropy_init(job.expert_training.entropy_init)
      .entropy_multiplier(job.expert_training.entropy_multiplier);
}

}  // namespace xmod::family
