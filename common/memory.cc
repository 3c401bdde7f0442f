#include "common/memory.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace xmod {

namespace {

// Bytes one layer holds or needs, for the whole micro-batch.
struct LayerBytes {
  double saved = 0;   // kept for the backward pass after the forward
  double work = 0;    // its backward pass's working set beyond `saved`
  double params = 0;  // 4 bytes per parameter (weights; the same again for gradients)
  double copies = 0;  // bf16 copies of its matrices under autocast
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

// Saved tensors of one block's Delta on n tokens per sequence, per token
// (docs/memory.md lists them): the residual-side fp32 tensors (block input,
// both x·rsqrt unless the norms are fused, x + attn), the normalised inputs of
// the two matmul groups, qkv and rotated q and k (or, fused, q, k and v), the
// attention output copy, the SwiGLU's w13 output, silu output (not when fused)
// and product, and the attention's own state.
double BlockSavedPerToken(const ModelShape& s, int64_t n, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), ff = static_cast<double>(s.d_ff);
  const double h = static_cast<double>(s.n_heads);
  const double cb = c.bf16 ? 2.0 : 4.0;  // compute dtype bytes
  const double residual = (FusedNorms(c) ? 2.0 : 4.0) * 4.0 * d;
  const double split_and_mlp = FusedSplitAndSwiglu(c) ? 3.0 * d + 3.0 * ff : 5.0 * d + 4.0 * ff;
  double bytes = residual + cb * (2.0 * d + d + split_and_mlp);
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

// The backward pass of a block on n tokens, beyond what it saved, per token, at
// the wider of its two stages: the SwiGLU's (w13's output gradient, silu's and
// the product's in the compute dtype, and fp32 residual gradients, with every
// saved tensor still alive) and the attention's (the SwiGLU's saved tensors
// freed; the gradients of q, k, v and the output, and on the eager path those
// of the probabilities or the scores, one at a time).
struct BlockBackward {
  double mlp_stage;   // on top of every saved tensor of the block
  double attn_stage;  // on top of the attention's saved tensors only
  double mlp_saved;   // what the SwiGLU half saves (freed before the attention stage)
};
BlockBackward BlockBackwardPerToken(const ModelShape& s, int64_t n, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), ff = static_cast<double>(s.d_ff);
  const double h = static_cast<double>(s.n_heads);
  const double cb = c.bf16 ? 2.0 : 4.0;
  BlockBackward b;
  b.mlp_stage = cb * 4.0 * ff + 3.0 * 4.0 * d;
  b.attn_stage = cb * 4.0 * d + 2.0 * 4.0 * d;
  if (!c.fused_attention) b.attn_stage += 4.0 * h * static_cast<double>(n);
  // x + a, x·rsqrt (not when fused), the normalised input, w13's output, silu's
  // (not when fused) and the product.
  b.mlp_saved =
      (FusedNorms(c) ? 1.0 : 2.0) * 4.0 * d + cb * (d + (FusedSplitAndSwiglu(c) ? 3.0 : 4.0) * ff);
  return b;
}

double Shards(const MemoryConfig& c) {
  return static_cast<double>(std::max<int64_t>(1, c.optimizer_shards));
}

}  // namespace

MemoryEstimate EstimateTrainingMemory(const ModelShape& s, const MemoryConfig& c) {
  const double d = static_cast<double>(s.d_model), v = static_cast<double>(s.vocab_size);
  const double t = static_cast<double>(s.context);
  const double rows = static_cast<double>(std::max<int64_t>(1, c.micro_batch_rows));
  const double tokens = rows * t;  // per micro-batch
  const double cb = c.bf16 ? 2.0 : 4.0;
  const int64_t k = RoutedTokens(s.capacity, s.context);
  const double layer_matrix =
      static_cast<double>(4 * s.d_model * s.d_model + 3 * s.d_model * s.d_ff);

  std::vector<LayerBytes> layers;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const bool routed = s.family != Family::kDense && s.stride > 1 && !IsAnchorLayer(l, s.stride);
    const int64_t n = routed ? k : s.context;
    const double block_tokens = rows * static_cast<double>(n);
    const double full = BlockSavedPerToken(s, n, c) * block_tokens +
                        (c.fused_attention ? 0.0 : static_cast<double>(n) * n);  // causal mask
    const BlockBackward back = BlockBackwardPerToken(s, n, c);
    // Beyond the saved tensors: the wider stage of the block's backward.
    const double stage_mlp = back.mlp_stage * block_tokens;
    const double stage_attn = (back.attn_stage - back.mlp_saved) * block_tokens;
    LayerBytes layer;
    layer.params = 4.0 * (layer_matrix + 2.0 * d + (routed ? d + 1.0 : 0.0));
    layer.copies = c.bf16 ? 2.0 * layer_matrix : 0.0;
    double extra = 0;  // a routed layer's own: the router's input, the gathered x, Δ
    if (routed) extra = 4.0 * d * tokens + cb * d * block_tokens + 8.0 * tokens;
    if (c.recompute) {
      layer.saved = 4.0 * d * block_tokens + extra;
      // The recomputed activations come back for the layer's backward.
      layer.work = full + std::max(stage_mlp, stage_attn);
    } else {
      layer.saved = full + extra;
      layer.work = std::max(stage_mlp, stage_attn);
    }
    layers.push_back(layer);
  }

  MemoryEstimate e;
  e.parameters = CountParams(s).all();
  const double p = static_cast<double>(e.parameters);
  e.weights = 4.0 * p;
  e.gradients = 4.0 * p;
  const double largest_param =
      std::max(v * d, layer_matrix);  // a whole parameter tensor, in elements
  e.optimizer = 8.0 * (p / Shards(c) + (c.optimizer_shards > 1 ? largest_param : 0.0));
  e.optimizer = std::min(e.optimizer, 8.0 * p);
  const double head_copy = c.bf16 ? 2.0 * d * v : 0.0;
  // The final norm (its input, x·rsqrt unless fused, the head's input) and the
  // fp32 log-probabilities the loss keeps.
  const double head_saved = ((FusedNorms(c) ? 4.0 : 8.0) * d + cb * d + 4.0 * v) * tokens;
  // Its backward at the widest: the gradients of the log-probabilities and of
  // the logits next to the saved log-probabilities, and (bf16) the gradient cast.
  const double head_work = (8.0 * v + (c.bf16 ? 2.0 * v : 0.0)) * tokens;

  double acts = head_saved, copies = head_copy;
  for (const LayerBytes& l : layers) {
    acts += l.saved;
    copies += l.copies;
  }
  e.activations = acts;
  e.weight_copies = copies;
  // Gradients exist during a forward pass from the second micro-batch of a step on.
  const double grads_in_forward = c.micro_batches > 1 ? e.gradients : 0.0;
  const double fixed = e.weights + e.optimizer;

  const auto consider = [&](double total, const char* phase) {
    if (total > e.peak) {
      e.peak = total;
      e.peak_phase = phase;
    }
  };
  // Forward: everything saved, every copy (with recomputation the copies of the
  // forward are dropped at its end, before the backward casts them again).
  consider(fixed + grads_in_forward + acts + copies, "forward");
  // Backward: the head first, then the layers from the last.
  {
    double alive = acts, grads = grads_in_forward, held_copies = c.recompute ? 0.0 : copies;
    grads = std::max(grads, 4.0 * 2.0 * d * v);  // the head's weight gradient comes first
    consider(fixed + alive + held_copies + (c.recompute ? head_copy : 0.0) + grads + head_work,
             "backward");
    alive -= head_saved;
    held_copies -= c.recompute ? 0.0 : head_copy;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      const double layer_grads = c.micro_batches > 1 ? 0.0 : it->params;
      const double layer_copies = c.recompute ? it->copies : 0.0;
      consider(fixed + alive + held_copies + layer_copies + grads + layer_grads + it->work,
               "backward");
      alive -= it->saved;
      held_copies -= c.recompute ? 0.0 : it->copies;
      grads += layer_grads;
    }
  }
  // Optimizer step: every gradient, and AdamW's temporaries (about two parameters).
  consider(e.weights + e.gradients + e.optimizer + 2.0 * 4.0 * largest_param, "optimizer");
  // Evaluation: no saved tensors; the logits in bf16 and fp32 and their
  // log-probabilities, and one layer's widest intermediates.
  {
    const double eval_tokens = static_cast<double>(std::max<int64_t>(1, c.eval_rows)) * t;
    const double ff = static_cast<double>(s.d_ff);
    double layer = eval_tokens * (cb * (3.0 * d + 2.0 * ff) + 8.0 * d);
    if (!c.fused_attention) {
      layer += static_cast<double>(std::max<int64_t>(1, c.eval_rows)) *
               static_cast<double>(s.n_heads) * t * t * 4.0 * 2.0;
    }
    const double logits = eval_tokens * v * ((c.bf16 ? 2.0 : 0.0) + 4.0 + 4.0);
    consider(e.weights + e.gradients + e.optimizer + head_copy + std::max(layer, logits),
             "evaluation");
  }
  return e;
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
