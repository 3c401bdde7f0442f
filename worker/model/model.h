// LibTorch decoders for the five families (docs/metrics.md, docs/baselines.md):
// dense (pre-norm, RMSNorm, RoPE, causal attention, SwiGLU, untied head), X-MoD
// (anchors every `stride` layers, routed blocks with variance-scaled gates,
// depth-wise balancing and causal router losses), MoD (stride 2, sigmoid gate
// only), and the expert baselines moe and deco, whose blocks replace the MLP with
// the expert MLPs of experts.h.
//
// Routed layers really shrink: the block runs on the gathered [B, k, d] tokens.
// Submodule names are the checkpoint format: layers.{l}.block.{attn,mlp,norm1,norm2},
// layers.{l}.router, layers.{l}.gamma, tok_emb, norm, head.
// Modules do no I/O and choose no device. Under a bf16 autocast region
// (precision.h) the blocks compute in bf16 while the residual stream, the
// router, the routing decision and the losses stay fp32.
#ifndef XMOD_WORKER_MODEL_MODEL_H_
#define XMOD_WORKER_MODEL_MODEL_H_

#include <torch/torch.h>

#include "common/accounting.h"
#include "worker/model/experts.h"

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
  // entropy_multiplier per step (DecoderImpl::UpdateEntropyCoef).
  TORCH_ARG(ExpertShape, experts) = {};
  TORCH_ARG(MoeGate, moe_gate) = MoeGate::kSoftmax;
  TORCH_ARG(double, capacity_factor) = 0.0;
  TORCH_ARG(double, z_coef) = 0.0;
  TORCH_ARG(double, entropy_init) = 0.0;
  TORCH_ARG(double, entropy_multiplier) = 1.0;

 public:
  bool IsRouted(int64_t layer) const {
    return family_ != Family::kDense && !IsExpertFamily(family_) && stride_ > 1 &&
           !IsAnchorLayer(layer, stride_);
  }
  bool IsExpertLayer(int64_t layer) const {
    return IsExpertFamily(family_) && layer >= experts_.dense_layers;
  }
};

// x · rsqrt(mean(x²) + eps) · weight, over the last dimension.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);  // [..., dim] -> [..., dim]
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// How attention is computed. kFused is LibTorch's scaled_dot_product_attention
// (2.0 and later: flash or memory-efficient kernels that never hold the
// [B, H, N, N] scores); kEager is matmul, mask, softmax, matmul, the only path on
// 1.13. Both compute the same function; outputs agree to rounding. kAuto (the
// default) takes the faster where it was measured: fused, except on CPU under
// bf16 autocast, where LibTorch 2.6's fused kernel made the dense d = 256 step
// 2.1x slower than eager fp32 while eager bf16 made it 1.7x faster
// (bench/worker_bench.cc part 5), and eager where there is no fused path.
enum class AttentionPath { kAuto, kEager, kFused };
// Whether this LibTorch has the fused path.
bool HaveFusedAttention();
// The path every Attention module takes from now on (process-wide). Asking for
// kFused without it is an error.
void SetAttentionPath(AttentionPath path);
AttentionPath CurrentAttentionPath();
// What kAuto (or a forced path) resolves to for a tensor on `device` now.
AttentionPath ResolvedAttentionPath(const torch::Device& device);
const char* AttentionPathName(AttentionPath path);

// Causal multi-head self-attention with rotary embeddings. The tokens of a call
// may be any subset of a sequence in increasing position order; `cos`/`sin` hold
// the rotary angles of their original positions.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t d_model, int64_t n_heads);
  // x [B, N, d]; cos, sin [B or 1, N, head_dim / 2]; allowed (optional, bool
  // [B, 1, N, N], true where query i may attend key j) replaces the causal mask.
  // Returns [B, N, d].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& allowed = {});
  torch::nn::Linear qkv{nullptr}, proj{nullptr};

 private:
  int64_t n_heads_;
};
TORCH_MODULE(Attention);

// Pre-norm transformer block. Delta() is what the block adds to its input:
// attn(norm1(x)) + mlp(norm2(x + attn(...))). The MLP is the dense SwiGLU or, in
// an expert layer, a MoeMlp or DecoMlp (registered as "mlp" all the same); only
// those fill `stats`.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d_model, int64_t n_heads, int64_t d_ff);
  BlockImpl(int64_t d_model, int64_t n_heads, MoeMlp moe);
  BlockImpl(int64_t d_model, int64_t n_heads, DecoMlp deco);
  torch::Tensor Delta(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      const torch::Tensor& allowed = {}, ExpertStats* stats = nullptr);
  RMSNorm norm1{nullptr}, norm2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};       // dense layers
  MoeMlp moe{nullptr};    // moe expert layers
  DecoMlp deco{nullptr};  // deco expert layers

 private:
  void Common(int64_t d_model, int64_t n_heads);
};
TORCH_MODULE(Block);

// block->Delta(x, cos, sin, allowed) through a custom autograd function that saves
// only its tensor inputs: the backward pass runs the block's forward again (in the
// autocast state and attention path of the forward) and differentiates that. The
// values and gradients are those of Delta itself; what changes is memory (one
// block's activations alive at a time in the backward, instead of all of them)
// for one more forward per block. The block must outlive the backward pass.
torch::Tensor RecomputedDelta(BlockImpl& block, const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin, const torch::Tensor& allowed = {});

enum class Routing {
  kTopK,       // top-k per sequence, as trained
  kThreshold,  // sigmoid(r) > 0.5 per token: causal, for generation-honest evaluation
};

// One layer: a block, plus for routed layers a router (d -> 1) and, for X-MoD, γ.
class LayerImpl : public torch::nn::Module {
 public:
  LayerImpl(const DecoderOptions& options, int64_t index);
  bool routed() const { return !router.is_empty(); }
  Block block{nullptr};
  torch::nn::Linear router{nullptr};
  torch::Tensor gamma;      // undefined unless X-MoD routed
  double gate_scale = 1.0;  // 1 / sqrt(stride − 1) for X-MoD
};
TORCH_MODULE(Layer);

struct DecoderOutput {
  torch::Tensor logits;          // [B, T, V]
  torch::Tensor hidden;          // [B, T, d]: the final residual stream, before the final norm
  torch::Tensor aux_loss;        // scalar: λ_bal·L_bal + λ_c·L_causal (0 for dense)
  torch::Tensor balance_loss;    // scalar, unweighted (0 when not applicable)
  torch::Tensor router_loss;     // scalar, unweighted BCE (0 for dense)
  torch::Tensor depth_fraction;  // scalar: mean fraction of layers a token passes through
  // [routed layers] float64, in layer order: how many of the batch's B·T tokens each
  // routed layer processed (B·k for top-k; those with sigmoid(r) > 0.5 for
  // threshold routing). Empty for dense models.
  torch::Tensor routed_counts;
  // Per routed layer, in layer order: the router's logits [B, T], fp32 even inside
  // a bf16 autocast region, detached (for inspection and tests).
  std::vector<torch::Tensor> router_logits;
  // moe and deco, per expert layer in layer order (ExpertStats). For moe,
  // balance_loss is the mean over expert layers of L_bal and z_loss that of the
  // z-loss; for deco, entropy is Σ_layers H / n_layers (DECO's (c/L)·H per layer).
  std::vector<ExpertStats> expert_stats;
  torch::Tensor z_loss;   // scalar, unweighted (0 unless moe)
  torch::Tensor entropy;  // scalar, unweighted (0 unless deco)
};

class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(DecoderOptions options);
  // tokens [B, T] int64 with T <= context. Returns logits and auxiliary losses.
  DecoderOutput forward(const torch::Tensor& tokens, Routing routing = Routing::kTopK);
  // Re-initialises every parameter from the global LibTorch generator.
  void reset_parameters();
  const DecoderOptions& options() const { return options_; }
  // deco: the entropy coefficient c (a buffer, so checkpoints carry it), and
  // DECO's controller, run once per optimizer step with the step's activation
  // ratio over all expert layers, micro-batches and ranks: c ← c·m above the
  // target, c ← max(c/m, entropy_init) otherwise.
  double entropy_coef() const;
  void UpdateEntropyCoef(double ratio);
  // moe with bias balancing: every expert layer's bias steps by `rate` against
  // the step's assignments, `routed` [expert layers, E] summed over micro-batches
  // and ranks.
  void UpdateExpertBias(const torch::Tensor& routed, double rate);
  std::vector<MoeMlp> MoeLayers() const;

  torch::nn::Embedding tok_emb{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  DecoderOptions options_;
  torch::Tensor rope_cos_, rope_sin_;  // [context, head_dim / 2]
  torch::Tensor entropy_coef_;         // deco: [] float64
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
double InitDepth(const DecoderOptions& options);

// Number of parameters a module holds (all of them, embeddings included).
int64_t CountModuleParameters(torch::nn::Module& module);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_MODEL_H_
