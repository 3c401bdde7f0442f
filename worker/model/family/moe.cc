// moe: after the first experts.dense_layers dense layers, every block's channel
// mixer is a token-choice top-k MoE (experts.h, docs/baselines.md).
#include "worker/model/expert_aux.h"
#include "worker/model/family/families.h"

namespace xmod::family {

std::shared_ptr<LayerImpl> MoeLayer(const DecoderOptions& o, int64_t index) {
  const ExpertShape& e = o.experts();
  if (index < e.dense_layers) return DenseLayer(o, index);
  // The experts before the attention: the generator's stream the golden losses pin.
  MoeMlp experts(MoeMlpOptions(o.d_model(), e.experts, e.top_k, e.width)
                     .shared(e.shared)
                     .gate(o.moe_gate())
                     .capacity_factor(o.capacity_factor()));
  Attention attention(o.d_model(), o.n_heads());
  return std::make_shared<LayerImpl>(Block(o.d_model(), attention.ptr(), experts.ptr()),
                                     o.recompute());
}

Objectives MoeObjectives(const DecoderOptions& o, DecoderImpl& model) {
  std::vector<MoeMlp> layers;
  for (const auto& layer : *model.layers) {
    auto moe = std::dynamic_pointer_cast<MoeMlpImpl>(
        std::dynamic_pointer_cast<LayerImpl>(layer)->block->channel_mixer);
    if (moe) layers.emplace_back(moe);
  }
  return {std::make_shared<MoeObjective>(std::move(layers), o.balance_coef(), o.z_coef(),
                                         o.bias_rate())};
}

// The job file has checked the gate name (common/families/moe.cc).
void MoeConfigure(const JobFile& job, DecoderOptions* o) {
  MoeGate gate = MoeGate::kSoftmax;
  ParseMoeGate(job.gate, &gate);
  o->experts(job.shape.experts)
      .moe_gate(gate)
      .capacity_factor(job.expert_training.capacity_factor)
      .z_coef(job.expert_training.z_coef)
      .bias_rate(job.expert_training.bias_rate);
}

}  // namespace xmod::family
