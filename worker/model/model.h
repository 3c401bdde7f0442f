// The LibTorch decoder of every family (docs/model.md): token embedding, a
// stack of layers, final RMSNorm, untied head. A layer is a block (block.h: a
// token mixer and a channel mixer, each pre-norm on a residual branch), run on
// every token (layer.h) or on the tokens its router chooses (routed_layer.h).
// Which layers a model has, how its weights start and which auxiliary
// objectives it trains with is its family's row in family/families.cc: dense,
// X-MoD (anchors every `stride` layers, routed layers with variance-scaled
// gates, depth-wise balancing and causal router losses), MoD (stride 2, sigmoid
// gate only), and the expert baselines moe and deco, whose blocks' channel
// mixers are the expert MLPs of experts.h.
//
// Submodule names are the checkpoint format: layers.{l}.block.{attn,mlp,norm1,norm2},
// layers.{l}.router, layers.{l}.gamma, tok_emb, norm, head (and the buffers
// rope_cos, rope_sin, entropy_coef for deco, layers.{l}.block.mlp.bias for moe).
// Modules do no I/O and choose no device. Under a bf16 autocast region
// (precision.h) the blocks compute in bf16 while the residual stream, the
// routers, the routing decisions and the losses stay fp32.
#ifndef XMOD_WORKER_MODEL_MODEL_H_
#define XMOD_WORKER_MODEL_MODEL_H_

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "common/accounting.h"
#include "worker/model/attention.h"
#include "worker/model/aux.h"
#include "worker/model/block.h"
#include "worker/model/experts.h"
#include "worker/model/layer.h"

namespace xmod {

struct DecoderOptions {
  DecoderOptions(int64_t vocab_size, int64_t d_model, int64_t n_heads, int64_t n_layers,
                 int64_t d_ff, int64_t context)
      : vocab_size_(vocab_size),
        d_model_(d_model),
        n_heads_(n_heads),
        n_layers_(n_layers),
        d_ff_(d_ff),
        context_(context),
        routed_tokens_(context) {}
  TORCH_ARG(int64_t, vocab_size);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);
  TORCH_ARG(int64_t, n_layers);
  TORCH_ARG(int64_t, d_ff);
  TORCH_ARG(int64_t, context);
  TORCH_ARG(Family, family) = Family::kDense;
  TORCH_ARG(int64_t, stride) = 1;
  TORCH_ARG(int64_t, routed_tokens);  // k per sequence of `context` tokens
  TORCH_ARG(double, balance_coef) = 0.0;
  TORCH_ARG(double, router_coef) = 0.0;
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(double, init_std) = 0.02;
  // Activation recomputation per layer: each block keeps only its input for the
  // backward pass and runs its forward again there (RecomputedDelta).
  TORCH_ARG(bool, recompute) = false;
  // moe and deco: the expert layers (shape) and how they train. balance_coef is
  // moe's α; the entropy coefficient of deco starts at entropy_init and moves by
  // entropy_multiplier per step (DecoObjective, expert_aux.h).
  TORCH_ARG(ExpertShape, experts) = {};
  TORCH_ARG(MoeGate, moe_gate) = MoeGate::kSoftmax;
  TORCH_ARG(double, capacity_factor) = 0.0;
  TORCH_ARG(double, z_coef) = 0.0;
  TORCH_ARG(double, entropy_init) = 0.0;
  TORCH_ARG(double, entropy_multiplier) = 1.0;
  // moe: the aux-loss-free bias step after each optimizer step (0: off).
  TORCH_ARG(double, bias_rate) = 0.0;
  // mol: the split stages' thin blocks (balance_coef is its CV² coefficient α).
  TORCH_ARG(MolShape, mol) = {};
  // gdn: every softmax_every-th layer keeps softmax attention (0: none does).
  TORCH_ARG(int64_t, softmax_every) = 0;
  // The job file's options object of a family that reads its own
  // (JobFile::family_options); null for the built-in families.
  TORCH_ARG(nlohmann::json, family_options);
};

struct ModelFamily;

struct DecoderOutput {
  torch::Tensor logits;  // [B, T, V]
  torch::Tensor hidden;  // [B, T, d]: the final residual stream, before the final norm
  // Σ weight · value over the kLoss entries of `aux`, in their order: what training
  // adds to the cross-entropy. A zero scalar for a model without auxiliary losses.
  torch::Tensor aux_loss;
  // The pass's named values (aux.h), as the model's objectives name them: their
  // losses (unweighted), means and counts. The trainer sums them over a step by
  // name (StepTally) and hands the sums to DecoderImpl::AfterStep.
  std::vector<AuxValue> aux;
  torch::Tensor depth_fraction;  // scalar: mean fraction of layers a token passes through
  // [routed layers] float64, in layer order: how many of the batch's B·T tokens each
  // routed layer processed (B·k for top-k; those with sigmoid(r) > 0.5 for
  // threshold routing). Empty without routed layers.
  torch::Tensor routed_counts;
  // Per routed layer, in layer order: the router's logits [B, T], fp32 even inside
  // a bf16 autocast region, detached (for inspection and tests).
  std::vector<torch::Tensor> router_logits;
  // The value named `name` in `aux`; undefined when there is none.
  torch::Tensor Aux(std::string_view name) const;
};

class DecoderImpl : public torch::nn::Module {
 public:
  // Builds the layers and objectives of options.family() (family/family.h) and
  // initialises every weight from the global LibTorch generator.
  explicit DecoderImpl(DecoderOptions options);
  // tokens [B, T] int64 with T <= context. Returns logits and the named values.
  DecoderOutput forward(const torch::Tensor& tokens, Routing routing = Routing::kTopK);
  // Re-initialises every parameter from the global LibTorch generator, module by
  // module (InitWeights), with std = init_std and out_std = init_std / sqrt(2 ·
  // InitDepth) for the output projections of residual branches.
  void reset_parameters();
  // After each optimizer step, with the step's sums of the named values over all
  // micro-batches and ranks: runs the objectives' step hooks (DECO's controller,
  // MoE's bias balancing) and returns, in order, the values the step reports.
  std::vector<NamedValue> AfterStep(const StepTally& tally);
  const DecoderOptions& options() const { return options_; }
  const ModelFamily& family() const { return *family_; }
  // The model's objective of type T; nullptr when it has none.
  template <typename T>
  T* objective() const {
    for (const auto& o : objectives_) {
      if (auto* t = dynamic_cast<T*>(o.get())) return t;
    }
    return nullptr;
  }

  torch::nn::Embedding tok_emb{nullptr};
  torch::nn::ModuleList layers;  // of LayerImpl (or a subclass)
  RMSNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  // The end of a pass, in fp32: the named values and the auxiliary loss.
  void Finish(LayerPass& pass, DecoderOutput* out) const;

  DecoderOptions options_;
  const ModelFamily* family_;
  std::vector<std::shared_ptr<LayerImpl>> layer_list_;  // `layers`, typed
  std::vector<std::shared_ptr<AuxObjective>> objectives_;
  torch::Tensor rope_cos_, rope_sin_;  // [context, head_dim / 2]
};
TORCH_MODULE(Decoder);

// The depth by which output projections of residual branches are scaled at
// initialisation (std = init_std / sqrt(2 · depth)): every anchor (dense layer)
// counts 1; for X-MoD the s − 1 routed layers between two anchors, whose outputs
// are gated by γ / sqrt(s − 1), count 1 together; MoD's routed layers (gate
// sigmoid(r) only) count 1 each. So depth = anchors + routed / (s − 1) for X-MoD
// and n_layers otherwise. Counting every layer of a deep FLOP-matched X-MoD model
// (129 layers at stride 8 is 17 anchors and 112 routed, depth 33) would shrink
// the anchors' branches as if the model were four times deeper than it acts.
// Each family's rule is its row's init_depth (family/).
double InitDepth(const DecoderOptions& options);

// Number of parameters a module holds (all of them, embeddings included).
int64_t CountModuleParameters(torch::nn::Module& module);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_MODEL_H_
