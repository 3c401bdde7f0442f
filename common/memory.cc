#include "common/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/mol_accounting.h"

namespace xmod {

namespace {

// Bytes one layer holds or needs, for the whole micro-batch.
struct LayerBytes {
  double saved = 0;   // kept for the backward pass after the forward
  double work = 0;    // its backward pass's working set beyond `saved`
  double params = 0;  // 4 bytes per parameter (weights; the same again for gradients)
  double copies = 0;  // bf16 copies of its matrices under autocast
  double eval = 0;    // its widest intermediates in an evaluation forward
};

// Which of the block's elementwise steps run as the fused CPU kernels
// (worker/model/fused_cpu.h): the norms wherever their input is fp32 on the CPU,
// the rotary split and SwiGLU when the compute dtype is fp32 too.
// With recomputation and eager attention the measured peak did not follow the
// fused kernels' smaller saved set (worker/train/memory_test.cc: 33.4 MiB fused
// against 34.4 composite, where the sets differ by 3.4 MiB): it is set by a
// transient of the recomputed block that the model does not itemise. There the
// composite count, which matched (ratio 0.93), stays; with fused attention the
// fused count matches (1.08).
bool FusedNorms(const MemoryConfig& c) { return !c.cuda && !(c.recompute && !c.fused_attention); }
bool FusedSplitAndSwiglu(const MemoryConfig& c) { return FusedNorms(c) && !c.bf16; }

double ComputeBytes(const MemoryConfig& c) { return c.bf16 ? 2.0 : 4.0; }

// The attention half of a block on n tokens per sequence, per token: its fp32
// residual-side tensors (the block input and, unless the norm is fused,
// x·rsqrt), the normalised input, qkv and rotated q and k (or, fused, q, k and
// v), the output copy for the projection, and the attention's own state.
double AttentionSavedPerToken(const ModelShape& s, int64_t n, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), h = static_cast<double>(s.n_heads);
  const double cb = ComputeBytes(c);
  const double residual = (FusedNorms(c) ? 1.0 : 2.0) * 4.0 * d;
  double bytes = residual + cb * (d + d + (FusedSplitAndSwiglu(c) ? 3.0 * d : 5.0 * d));
  if (c.fused_attention) {
    bytes += cb * d + 4.0 * h;  // output and log-sum-exp
  } else {
    // Softmax probabilities [H, n, n] per sequence: n per head per token; under
    // CUDA's autocast in fp32 plus their bf16 copy for the matmul, under CPU's bf16.
    const double per_score = !c.bf16 ? 4.0 : (c.cuda ? 6.0 : 2.0);
    bytes += per_score * h * static_cast<double>(n);
  }
  return bytes;
}

// The attention half's backward, per token, on top of its own saved tensors (the
// feed-forward half's are freed by then): the gradients of q, k, v and the
// output, fp32 residual gradients, and on the eager path those of the
// probabilities or the scores, one at a time.
double AttentionStagePerToken(const ModelShape& s, int64_t n, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model);
  double bytes = ComputeBytes(c) * 4.0 * d + 2.0 * 4.0 * d;
  if (!c.fused_attention) bytes += 4.0 * static_cast<double>(s.n_heads) * static_cast<double>(n);
  return bytes;
}

// The feed-forward half of one block: the dense SwiGLU, or an expert layer's MoE
// or DECO MLP (worker/model/experts.h).
struct FeedForward {
  double saved = 0;     // per token: what it keeps for the backward pass
  double stage = 0;     // per token: its backward's working set on top of every saved tensor
  double eval = 0;      // per token: its widest intermediates in an evaluation forward
  double work = 0;      // bytes per layer: backward transients of its weight gradients
  double params = 0;    // its parameters
  double matrices = 0;  // the parameters that get a bf16 copy under autocast
  double largest = 0;   // its largest single parameter tensor
};

// The SwiGLU of width f on its (already saved) input, per token: w13's output
// and the product, and silu's output unless the fused kernel runs.
double SwigluSaved(double f, const MemoryConfig& c) {
  return ComputeBytes(c) * (FusedSplitAndSwiglu(c) ? 3.0 : 4.0) * f;
}

// Every feed-forward half starts the same: x + attn and (unless the norm is
// fused) x·rsqrt in fp32, and the fp32 gradients of the residual in its backward.
FeedForward ResidualSide(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model);
  FeedForward f;
  f.saved = (FusedNorms(c) ? 1.0 : 2.0) * 4.0 * d;
  f.stage = 3.0 * 4.0 * d;
  f.eval = 8.0 * d;
  f.params = 2.0 * d;  // the two RMSNorm weights of the block
  return f;
}

// The dense SwiGLU of width d_ff: its normalised input (the compute-dtype copy
// w13 keeps) and its activations; its backward holds the gradients of w13's
// output, silu's and the product.
FeedForward DenseFeedForward(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), ff = static_cast<double>(s.d_ff);
  const double cb = ComputeBytes(c);
  FeedForward f = ResidualSide(s, c);
  f.saved += cb * d + SwigluSaved(ff, c);
  f.stage += cb * 4.0 * ff;
  f.eval += cb * (3.0 * d + 2.0 * ff);
  f.matrices = 3.0 * d * ff;
  f.params += f.matrices;
  return f;
}

// A MoE layer: E experts of width d_e, top-k, K_s shared (MoeMlp, dropless). Per
// token it keeps the router's fp32 input and its logits and probabilities over
// all E (12E covers each gate), the chosen experts and gates and the sort's
// int64 indices (28k), each assignment's gathered input, hidden state (4·d_e:
// w13's output, silu's and the product) and output before and after its gate
// (3·d), the gates again, and the shared SwiGLU. Its backward holds the
// gradients of the gated outputs and of the gathered inputs (an fp32 buffer of
// all assignments and one expert's full-size slice gradient), and, per layer,
// every expert's weight gradient before they are stacked into one tensor.
FeedForward MoeFeedForward(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), cb = ComputeBytes(c);
  const ExpertShape& e = s.experts;
  const double n_e = static_cast<double>(e.experts), k = static_cast<double>(e.top_k);
  const double width = static_cast<double>(e.width);
  const double shared = static_cast<double>(e.shared) * width;
  const double experts = 3.0 * d * width * n_e;  // w13 [E, d, 2·d_e] and w2 [E, d_e, d]
  FeedForward f = ResidualSide(s, c);
  f.saved += 4.0 * d + 12.0 * n_e + 28.0 * k + cb * k + cb * k * (3.0 * d + 4.0 * width);
  if (shared > 0) f.saved += (c.bf16 ? cb * d : 0.0) + SwigluSaved(shared, c);
  f.stage += cb * 2.0 * k * d + 8.0 * k * d + (shared > 0 ? cb * 4.0 * shared : 0.0);
  f.eval += 4.0 * k * d + cb * k * (3.0 * d + 2.0 * width) + 4.0 * n_e;
  f.work = 4.0 * experts;
  f.matrices = experts + 3.0 * d * shared;
  f.params += f.matrices + d * n_e;  // the router (fp32, no copy)
  f.largest = 2.0 * d * width * n_e;
  return f;
}

// A DECO layer: E experts of width d_e as one wide up and down projection, and a
// SwiGLU shared expert of width d_s (DecoMlp). Per token it keeps the router's
// fp32 input, its ReLU scores, the scaled scores, the normalised probabilities,
// their shifted copy and log (20E), the up projection's input copy under bf16,
// and over the E·d_e hidden units: the up projection's output, its centred
// value and square, x·rsqrt (compute dtype), NormSiLU's scaled output and silu's
// output (fp32: the fp32 γ promotes them) and the down projection's input.
// Its backward holds two fp32 gradients of that width at once (and under bf16
// a compute-dtype one besides).
FeedForward DecoFeedForward(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), cb = ComputeBytes(c);
  const ExpertShape& e = s.experts;
  const double n_e = static_cast<double>(e.experts), width = static_cast<double>(e.width);
  const double hidden = n_e * width, shared = static_cast<double>(e.shared_width);
  FeedForward f = ResidualSide(s, c);
  // CUDA's autocast runs the norm's square and rsqrt in fp32, which the CPU
  // measurement does not show; the fp32 count (28 bytes) bounds that case.
  const double per_hidden = c.bf16 && !c.cuda ? 5.0 * cb + 8.0 : 28.0;
  f.saved += 4.0 * d + (c.bf16 ? cb * d : 0.0) + 20.0 * n_e + cb * n_e + per_hidden * hidden;
  if (shared > 0) f.saved += (c.bf16 ? cb * d : 0.0) + SwigluSaved(shared, c);
  f.stage += (8.0 + (c.bf16 ? 2.0 : 0.0)) * hidden + (shared > 0 ? cb * 4.0 * shared : 0.0);
  f.eval += 3.0 * 4.0 * hidden + 4.0 * n_e;
  f.matrices = 2.0 * d * hidden + 3.0 * d * shared;
  f.params += f.matrices + d * n_e + n_e + width;  // router, λ and NormSiLU's γ stay fp32
  f.largest = d * hidden;
  return f;
}

FeedForward FeedForwardOf(const ModelShape& s, int64_t layer, const MemoryConfig& c) {
  if (!IsExpertLayer(s, layer)) return DenseFeedForward(s, c);
  // A fixed number of experts per token (moe) keeps only their activations; deco
  // computes every expert densely in training.
  return s.experts.top_k > 0 ? MoeFeedForward(s, c) : DecoFeedForward(s, c);
}

// A Mixture-of-Layers thin block's shape: width d_t, the model's head width,
// a SwiGLU of DefaultDff(d_t), the model's context (common/accounting.h, MolShape).
ModelShape ThinShape(const ModelShape& s) {
  ModelShape t = s;
  t.family = Family::kDense;
  t.d_model = s.mol.thin_width;
  t.n_heads = std::max<int64_t>(1, s.mol.thin_width / std::max<int64_t>(1, s.d_model / s.n_heads));
  t.d_ff = DefaultDff(s.mol.thin_width);
  return t;
}

// The chunk of the delta rule's training path (worker/model/gated_deltanet.h).
constexpr double kDeltaRuleChunk = 64.0;

// What a Gated DeltaNet mixer of width w (H heads) saves for the backward pass,
// in two parts (the rule runs on the chunk-padded sequence, the rest does not):
// per stream q, k, v the projection's output, the convolution's
// contiguous input copy and output, and SiLU's output (compute dtype), and for q
// and k the fp32 normalised copy and its rsqrt; the decay's and β's few values per
// head; in the chunked rule (fp32) eight vectors of width w (q·scale, k·β, v·β,
// k·β·e^Γ, W, diag(e^Γ)Q, the keys decayed to the chunk's end, V') and six C-wide
// rows per head (D, K·Kᵀ, A, (I + A)⁻¹, Q·Kᵀ, their product); then the output's
// fp32 value, its normalised and weighted copies, the gate's projection and SiLU,
// and the output projection's input.
// The rule's part, per token of the chunk-padded sequence:
double DeltaRuleSavedPerToken(double w, double heads) {
  return 8.0 * 4.0 * w + 6.0 * 4.0 * heads * kDeltaRuleChunk;
}
// The rest, per token:
double DeltaNetOutsideRuleSavedPerToken(double w, double heads, const MemoryConfig& c) {
  const double cb = ComputeBytes(c);
  const double streams = 3.0 * 4.0 * w * cb + 2.0 * (4.0 * w + 4.0 * heads);
  const double gates = 6.0 * 4.0 * heads;
  const double output = 3.0 * 4.0 * w + 3.0 * cb * w;
  return streams + gates + output;
}

// The tokens per sequence a routed block of a stage runs on, planned high: its
// expected share f·T plus three binomial standard deviations (the block's busiest
// sequence sets the batch's padded length), at most T.
double RoutedTokensPlanned(const ModelShape& s) {
  const double t = static_cast<double>(s.context);
  const double routed = static_cast<double>(s.mol.blocks - s.mol.shared);
  const double f = routed > 0 ? static_cast<double>(s.mol.top_k) / routed : 1.0;
  return std::min(t, std::ceil(f * t + 3.0 * std::sqrt(f * (1.0 - f) * t)));
}

double Shards(const MemoryConfig& c) {
  return static_cast<double>(std::max<int64_t>(1, c.optimizer_shards));
}

// One layer: the attention half and the feed-forward half on the tokens the
// layer processes (k of them in a routed layer), and a routed layer's own
// tensors (the router's input over the whole sequence, the gathered x, Δ).
// A Mixture-of-Layers stage (worker/model/mol_stage.h): the stage's input (fp32,
// kept by the down projections and the gathers); each shared thin block on every
// token; each routed block on the tokens routed to it, padded per batch to its
// busiest sequence (RoutedTokensPlanned) and, inside the delta rule, to whole
// chunks, with its gathered input (fp32, width d), indices and output rows (fp32,
// width d). A thin block keeps what a block of width d_t keeps (its mixer Gated
// DeltaNet for routed blocks unless softmax) and its delta for the up projection.
LayerBytes MolStageCost(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), cb = ComputeBytes(c);
  const double rows = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double context = static_cast<double>(s.context);
  const ModelShape thin = ThinShape(s);
  const double w = static_cast<double>(thin.d_model), heads = static_cast<double>(thin.n_heads);
  const FeedForward ff = DenseFeedForward(thin, c);
  const double residual = (FusedNorms(c) ? 1.0 : 2.0) * 4.0 * w + cb * w;  // norm1's input, output
  const double cast = c.bf16 ? cb * d : 0.0;  // the down projection's compute-dtype input
  const double shared_tokens = rows * context;
  const double shared_block = AttentionSavedPerToken(thin, s.context, c) + ff.saved + cb * w +
                              cast + (c.fused_attention ? 0.0 : context);  // causal mask per query
  const double n = RoutedTokensPlanned(s);
  const double routed_blocks = static_cast<double>(s.mol.blocks - s.mol.shared);
  const double slots = rows * context * static_cast<double>(s.mol.top_k);  // real routed tokens
  double routed_block;  // per padded token of one routed block, besides the delta rule's own
  double rule = 0.0;    // per chunk-padded token
  if (s.mol.routed_deltanet) {
    routed_block = residual + DeltaNetOutsideRuleSavedPerToken(w, heads, c) + ff.saved + cb * w +
                   4.0 * d + 8.0 + cast;
    rule = DeltaRuleSavedPerToken(w, heads);
  } else {
    routed_block = AttentionSavedPerToken(thin, static_cast<int64_t>(n), c) + ff.saved + cb * w +
                   4.0 * d + 8.0 + cast + (c.fused_attention ? 0.0 : n);
  }
  const double padded = std::ceil(n / kDeltaRuleChunk) * kDeltaRuleChunk;
  LayerBytes layer;
  const double stage_params = static_cast<double>(MolStageParams(s).total);
  layer.params = 4.0 * stage_params;
  layer.copies = c.bf16 ? 2.0 * stage_params : 0.0;
  const double own = 4.0 * d * rows * context;  // the stage's input
  const double routed_saved =
      routed_blocks * rows * (n * routed_block + padded * rule) + slots * (4.0 * d + 8.0);
  const double saved = own + static_cast<double>(s.mol.shared) * shared_tokens * shared_block +
                       routed_saved + rows * context * (8.0 * routed_blocks + 12.0);
  // The backward's working set: the fp32 gradient buffers of the stage's input and
  // of its routed outputs, and one routed block's backward at once.
  const double block_stage =
      std::max(ff.stage, AttentionStagePerToken(thin, s.context, c) - ff.saved);
  layer.work = 3.0 * 4.0 * d * rows * context + block_stage * rows * n + rows * padded * rule;
  layer.saved = saved;
  layer.eval = 4.0 * d + std::max(ff.eval, DeltaNetOutsideRuleSavedPerToken(w, heads, c) +
                                               DeltaRuleSavedPerToken(w, heads));
  return layer;
}

// A Gated DeltaNet layer of a gdn model (the dense block with the DeltaNet mixer
// at width d over the whole sequence): the norm's input and output, the mixer's
// tensors outside the delta rule and the SwiGLU's per token, the rule's per token
// of the chunk-padded sequence; no attention probabilities and no causal mask.
LayerBytes DeltaNetLayerCost(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), cb = ComputeBytes(c);
  const double heads = static_cast<double>(s.n_heads);
  const double rows = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double context = static_cast<double>(s.context);
  const FeedForward ff = DenseFeedForward(s, c);
  const double per_token = (FusedNorms(c) ? 1.0 : 2.0) * 4.0 * d + cb * d +
                           DeltaNetOutsideRuleSavedPerToken(d, heads, c) + ff.saved;
  const double padded = std::ceil(context / kDeltaRuleChunk) * kDeltaRuleChunk;
  const double rule = DeltaRuleSavedPerToken(d, heads);
  const double mixer_matrices = 5.0 * d * d + 2.0 * d * heads;
  LayerBytes layer;
  layer.params = 4.0 * (static_cast<double>(DeltaNetMixerParams(s.d_model, s.d_model / s.n_heads)) +
                        ff.params);
  layer.copies = c.bf16 ? 2.0 * (mixer_matrices + ff.matrices) : 0.0;
  layer.saved = rows * (context * per_token + padded * rule);
  const double stage = std::max(ff.stage, cb * 4.0 * d + 2.0 * 4.0 * d - ff.saved);
  layer.work = stage * rows * context + rows * padded * rule + ff.work;
  // An evaluation forward frees the rule's intermediates as it goes: about half of
  // its saved set is alive at once (worker/train/memory_test.cc, GdnEagerMicro2,
  // whose peak is the evaluation's).
  layer.eval = std::max(ff.eval, DeltaNetOutsideRuleSavedPerToken(d, heads, c) + 0.5 * rule);
  return layer;
}

LayerBytes LayerCost(const ModelShape& s, int64_t l, const MemoryConfig& c) {
  if (Traits(s.family).routing == RoutingKind::kLayers) return MolStageCost(s, c);
  if (!IsSoftmaxLayer(s, l)) return DeltaNetLayerCost(s, c);
  const double d = static_cast<double>(s.d_model);
  const double rows = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double tokens = rows * static_cast<double>(s.context);
  const bool routed = Traits(s.family).routing == RoutingKind::kDepth && s.stride > 1 &&
                      !IsAnchorLayer(l, s.stride);
  const int64_t n = routed ? RoutedTokens(s.capacity, s.context) : s.context;
  const double block_tokens = rows * static_cast<double>(n);
  const FeedForward ff = FeedForwardOf(s, l, c);
  const double full = (AttentionSavedPerToken(s, n, c) + ff.saved) * block_tokens +
                      (c.fused_attention ? 0.0 : static_cast<double>(n) * n);  // causal mask
  // Beyond the saved tensors: the wider stage of the block's backward.
  const double stage = std::max(ff.stage, AttentionStagePerToken(s, n, c) - ff.saved);
  const double attn_matrices = 4.0 * d * d;
  LayerBytes layer;
  layer.params = 4.0 * (attn_matrices + ff.params + (routed ? d + 1.0 : 0.0));
  layer.copies = c.bf16 ? 2.0 * (attn_matrices + ff.matrices) : 0.0;
  layer.eval = ff.eval;
  double extra = 0;  // a routed layer's own
  if (routed) extra = 4.0 * d * tokens + ComputeBytes(c) * d * block_tokens + 8.0 * tokens;
  if (c.recompute) {
    layer.saved = 4.0 * d * block_tokens + extra;
    // The recomputed activations come back for the layer's backward.
    layer.work = full + stage * block_tokens + ff.work;
  } else {
    layer.saved = full + extra;
    layer.work = stage * block_tokens + ff.work;
  }
  return layer;
}

// The largest single parameter tensor, in elements: what ZeRO-1's whole-parameter
// shards may overshoot by, and what AdamW's temporaries are sized by.
double LargestParameter(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model);
  double largest = std::max(static_cast<double>(s.vocab_size) * d,
                            4.0 * d * d + 3.0 * d * static_cast<double>(s.d_ff));
  if (IsExpertFamily(s.family) && s.experts.dense_layers < s.n_layers) {
    largest = std::max(largest, FeedForwardOf(s, s.experts.dense_layers, c).largest);
  }
  return largest;
}

// What the step's phases need besides the layers: the head's saved tensors, its
// bf16 copy and its backward's working set.
struct HeadBytes {
  double saved = 0, copy = 0, work = 0;
};
HeadBytes HeadCost(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), v = static_cast<double>(s.vocab_size);
  const double tokens = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows)) *
                        static_cast<double>(s.context);
  HeadBytes h;
  h.copy = c.bf16 ? 2.0 * d * v : 0.0;
  // The final norm (its input, x·rsqrt unless fused, the head's input) and the
  // fp32 log-probabilities the loss keeps.
  h.saved = ((FusedNorms(c) ? 4.0 : 8.0) * d + ComputeBytes(c) * d + 4.0 * v) * tokens;
  // Its backward at the widest: the gradients of the log-probabilities and of
  // the logits next to the saved log-probabilities, and (bf16) the gradient cast.
  h.work = (8.0 * v + (c.bf16 ? 2.0 * v : 0.0)) * tokens;
  return h;
}

// The peak over the backward pass: the head first, then the layers from the
// last, each freeing its saved tensors and (with one micro-batch) allocating
// its gradients as it goes.
void WalkBackward(const ModelShape& s, const MemoryConfig& c, const std::vector<LayerBytes>& layers,
                  const HeadBytes& head, double fixed, double grads_in_forward, MemoryEstimate* e) {
  const double d = static_cast<double>(s.d_model), v = static_cast<double>(s.vocab_size);
  double alive = e->activations, grads = grads_in_forward;
  double held_copies = c.recompute ? 0.0 : e->weight_copies;
  grads = std::max(grads, 4.0 * 2.0 * d * v);  // the head's weight gradient comes first
  const auto consider = [e](double total) {
    if (total > e->peak) {
      e->peak = total;
      e->peak_phase = "backward";
    }
  };
  consider(fixed + alive + held_copies + (c.recompute ? head.copy : 0.0) + grads + head.work);
  alive -= head.saved;
  held_copies -= c.recompute ? 0.0 : head.copy;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const double layer_grads = c.micro_batches > 1 ? 0.0 : it->params;
    const double layer_copies = c.recompute ? it->copies : 0.0;
    consider(fixed + alive + held_copies + layer_copies + grads + layer_grads + it->work);
    alive -= it->saved;
    held_copies -= c.recompute ? 0.0 : it->copies;
    grads += layer_grads;
  }
}

}  // namespace

MemoryEstimate EstimateTrainingMemory(const ModelShape& s, const MemoryConfig& c) {
  const double v = static_cast<double>(s.vocab_size);
  const double t = static_cast<double>(s.context);
  std::vector<LayerBytes> layers;
  for (int64_t l = 0; l < s.n_layers; ++l) layers.push_back(LayerCost(s, l, c));
  const HeadBytes head = HeadCost(s, c);

  MemoryEstimate e;
  e.parameters = CountParams(s).all();
  const double p = static_cast<double>(e.parameters);
  e.weights = 4.0 * p;
  e.gradients = 4.0 * p;
  const double largest_param = LargestParameter(s, c);
  e.optimizer = 8.0 * (p / Shards(c) + (c.optimizer_shards > 1 ? largest_param : 0.0));
  e.optimizer = std::min(e.optimizer, 8.0 * p);
  e.activations = head.saved;
  e.weight_copies = head.copy;
  for (const LayerBytes& l : layers) {
    e.activations += l.saved;
    e.weight_copies += l.copies;
  }
  // Gradients exist during a forward pass from the second micro-batch of a step on.
  const double grads_in_forward = c.micro_batches > 1 ? e.gradients : 0.0;
  const double fixed = e.weights + e.optimizer;

  const auto consider = [&e](double total, const char* phase) {
    if (total > e.peak) {
      e.peak = total;
      e.peak_phase = phase;
    }
  };
  // Forward: everything saved, every copy (with recomputation the copies of the
  // forward are dropped at its end, before the backward casts them again).
  consider(fixed + grads_in_forward + e.activations + e.weight_copies, "forward");
  WalkBackward(s, c, layers, head, fixed, grads_in_forward, &e);
  // Optimizer step: every gradient, and AdamW's temporaries (about two parameters).
  consider(e.weights + e.gradients + e.optimizer + 2.0 * 4.0 * largest_param, "optimizer");
  // Evaluation: no saved tensors; the logits in bf16 and fp32 and their
  // log-probabilities, or one layer's widest intermediates.
  const double eval_rows = static_cast<double>(std::max<int64_t>(1, c.eval_rows));
  double layer = 0;
  for (const LayerBytes& l : layers) layer = std::max(layer, l.eval * eval_rows * t);
  if (!c.fused_attention) layer += eval_rows * static_cast<double>(s.n_heads) * t * t * 4.0 * 2.0;
  const double logits = eval_rows * t * v * ((c.bf16 ? 2.0 : 0.0) + 4.0 + 4.0);
  consider(e.weights + e.gradients + e.optimizer + head.copy + std::max(layer, logits),
           "evaluation");
  return e;
}

namespace {

// The routed experts' parameters of an expert layer: what expert parallelism
// splits (the router and shared experts stay with the layer's other weights).
double RoutedExpertParams(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const ExpertShape& e = s.experts;
  const double routed = static_cast<double>(e.experts) * static_cast<double>(e.width);
  return (e.top_k > 0 ? 3.0 : 2.0) * d * routed;
}

// The parameters of one GPT-style layer: q and the output projection h², k and v
// h·h_kv each, the MLP (GELU 2·h·f, SwiGLU 3·h·f), the two norms' 2h each.
double GptLayerParams(const ModelShape& s, const ParallelMemoryConfig& c) {
  const double h = static_cast<double>(s.d_model), f = static_cast<double>(s.d_ff);
  const double kv_heads = static_cast<double>(c.kv_heads > 0 ? c.kv_heads : s.n_heads);
  const double kv = h * kv_heads / static_cast<double>(s.n_heads);
  return 2.0 * h * h + 2.0 * h * kv + (c.mlp == MlpKind::kGelu ? 2.0 : 3.0) * h * f + 4.0 * h;
}

struct StageMemory {
  double dense_params = 0;   // split over tensor ranks
  double expert_params = 0;  // split over expert ranks
  double activations = 0;    // one micro-batch
  double largest_layer = 0;  // parameters of its largest layer (ZeRO-3 gathers)
  double embedding = 0;      // of dense_params: the token embedding and the head
  double logits = 0;
};

// One pipeline stage's layers [first, last), with the embedding on stage 0 and the
// head on the last.
StageMemory StageOf(const ModelShape& s, const ParallelMemoryConfig& c, int64_t first, int64_t last,
                    bool has_embedding, bool has_head) {
  const double h = static_cast<double>(s.d_model), v = static_cast<double>(s.vocab_size);
  const double t = static_cast<double>(std::max<int64_t>(1, c.tensor_parallel));
  const double rows = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double tokens = rows * static_cast<double>(s.context);
  MemoryConfig mc;
  mc.micro_batch_rows = c.micro_batch_rows;
  mc.bf16 = c.bf16;
  mc.cuda = true;
  mc.recompute = c.recompute == RecomputeMode::kFull;
  mc.fused_attention = c.fused_attention || c.recompute == RecomputeMode::kSelective;
  StageMemory m;
  for (int64_t l = first; l < last; ++l) {
    double params = 0, saved = 0;
    if (c.style == BlockStyle::kGpt) {
      params = GptLayerParams(s, c);
      saved = GptLayerActivationBytes(s, c);
    } else {
      const LayerBytes layer = LayerCost(s, l, mc);
      params = layer.params / 4.0;
      // Sequence parallelism splits every saved tensor over the tensor ranks.
      saved = layer.saved / t;
    }
    const double routed = IsExpertLayer(s, l) ? RoutedExpertParams(s) : 0.0;
    m.dense_params += params - routed;
    m.expert_params += routed;
    m.activations += saved;
    m.largest_layer = std::max(m.largest_layer, params);
  }
  if (has_embedding) m.embedding += v * h;
  if (has_head) m.embedding += v * h + h;  // the head and the final norm
  m.dense_params += m.embedding;
  if (has_head) {
    if (c.style == BlockStyle::kGpt) {
      m.logits = 4.0 * tokens * v / t;  // fp32 logits (Korthikanti)
    } else {
      const HeadBytes head = HeadCost(s, mc);
      m.logits = (head.saved + head.work) / t;
    }
  }
  return m;
}

}  // namespace

double GptLayerActivationBytes(const ModelShape& s, const ParallelMemoryConfig& c) {
  const double h = static_cast<double>(s.d_model), f = static_cast<double>(s.d_ff);
  const double a = static_cast<double>(s.n_heads), seq = static_cast<double>(s.context);
  const double b = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double t = static_cast<double>(std::max<int64_t>(1, c.tensor_parallel));
  const double sbh = seq * b * h;
  const double kv = (c.kv_heads > 0 ? static_cast<double>(c.kv_heads) : a) / a;
  if (c.recompute == RecomputeMode::kFull) {
    return 2.0 * sbh / (c.sequence_parallel ? t : 1.0);  // the layer's input only
  }
  // Replicated without sequence parallelism: both norms' inputs (4), the inputs of
  // the QKV and first MLP matmuls (2 + 2), the two dropout masks (1 + 1).
  const double replicated = 10.0 * sbh;
  // Split over tensor ranks: q, k, v (2 + 4·kv), the output projection's input (2)
  // and the MLP's hidden tensors: GELU's input and output (2·2f/h); SwiGLU's gate
  // and up outputs, SiLU's output and their product (2·4f/h).
  const double mlp = (c.mlp == MlpKind::kGelu ? 4.0 : 8.0) * f / h;
  const double sharded = (2.0 + 4.0 * kv + 2.0 + mlp) * sbh;
  // Unfused attention keeps the scores' softmax (2 bytes), its dropout mask (1) and
  // output (2) per head per query per key.
  const bool fused = c.fused_attention || c.recompute == RecomputeMode::kSelective;
  const double scores = fused ? 0.0 : 5.0 * a * seq * seq * b;
  return (c.sequence_parallel ? replicated / t : replicated) + (sharded + scores) / t;
}

ParallelMemoryEstimate EstimateParallelMemory(const ModelShape& s, const ParallelMemoryConfig& c) {
  const int64_t p = std::max<int64_t>(1, c.pipeline_parallel);
  const double t = static_cast<double>(std::max<int64_t>(1, c.tensor_parallel));
  const double e = static_cast<double>(std::max<int64_t>(1, c.expert_parallel));
  const double dp = static_cast<double>(std::max<int64_t>(1, c.data_parallel));
  // Experts are data-parallel over the ranks of the DP group that hold the same ones.
  const double expert_dp = std::max(1.0, dp / e);
  const double m = static_cast<double>(std::max<int64_t>(1, c.micro_batches));
  const double v = static_cast<double>(std::max<int64_t>(1, c.interleave));
  const double pp = static_cast<double>(p);
  // Micro-batches whose activations the first stage holds at once under 1F1B.
  double in_flight = std::min(m, pp);
  if (v > 1 && p > 1) in_flight *= 1.0 + (pp - 1.0) / (pp * v);

  ParallelMemoryEstimate best;
  const int64_t n_layers = s.n_layers;
  for (const int64_t stage : {int64_t{0}, p - 1}) {
    const int64_t first = stage * n_layers / p, last = (stage + 1) * n_layers / p;
    const StageMemory sm = StageOf(s, c, first, last, stage == 0, stage == p - 1);
    ParallelMemoryEstimate est;
    const double dense = sm.dense_params / t, expert = sm.expert_params / e;
    est.parameters = dense + expert;
    est.embedding_parameters = sm.embedding / t;
    const auto sharded = [&](double bytes, int min_stage) {
      return c.zero_stage >= min_stage ? bytes * dense / dp + bytes * expert / expert_dp
                                       : bytes * (dense + expert);
    };
    est.weights = sharded(c.weight_bytes, 3);
    est.gradients = sharded(c.grad_bytes, 2);
    est.optimizer = sharded(c.optimizer_bytes, 1);
    // Stage 0 holds the most micro-batches; the last stage holds as many as 1F1B
    // has started when its first backward begins: one. Context parallelism
    // splits every token-sized tensor.
    const double cp = static_cast<double>(std::max<int64_t>(1, c.context_parallel));
    est.activations = sm.activations * (stage == 0 ? in_flight : 1.0) / cp;
    est.logits = sm.logits / cp;
    if (c.zero_stage >= 3) {
      // The gathered weights of the layer computing and the one prefetched, and a
      // layer's full gradient before its reduce-scatter.
      est.buffers = sm.largest_layer / t * (2.0 * c.weight_bytes + c.grad_bytes);
    }
    est.total =
        est.weights + est.gradients + est.optimizer + est.activations + est.logits + est.buffers;
    if (est.total > best.total) best = est;
    if (p == 1) break;
  }
  return best;
}

int64_t EvalRows(int64_t micro_rows, int64_t context, int64_t vocab_size) {
  constexpr int64_t kTokens = 16384, kLogitFloats = int64_t{1} << 26;  // 256 MiB of fp32
  const int64_t tokens = std::min(kTokens, kLogitFloats / std::max<int64_t>(1, vocab_size));
  return std::max<int64_t>({1, micro_rows, tokens / std::max<int64_t>(1, context)});
}

double UsableDeviceBytes(double device_bytes) {
  return std::max(0.0, 0.92 * device_bytes - 1.5 * double(int64_t{1} << 30));
}

std::string FormatBytes(double bytes) {
  char buffer[32];
  const double gib = bytes / double(int64_t{1} << 30);
  if (gib >= 1.0) {
    std::snprintf(buffer, sizeof buffer, "%.1f GiB", gib);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / double(int64_t{1} << 20));
  }
  return buffer;
}

}  // namespace xmod
