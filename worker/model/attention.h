// Causal multi-head self-attention with rotary embeddings: the token mixer of
// every block today (mixer.h), and the switch between its two computations.
#ifndef XMOD_WORKER_MODEL_ATTENTION_H_
#define XMOD_WORKER_MODEL_ATTENTION_H_

#include <torch/torch.h>

#include "worker/model/mixer.h"

namespace xmod {

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

// Submodules qkv (d -> 3d) and proj (d -> d), no biases.
class AttentionImpl : public TokenMixerImpl {
 public:
  AttentionImpl(int64_t d_model, int64_t n_heads);
  // x [B, N, d] -> [B, N, d]; head_dim = d / n_heads.
  torch::Tensor forward(const torch::Tensor& x, const TokenPositions& at) override;
  // qkv from N(0, std), proj (a residual branch's output) from N(0, out_std).
  void InitWeights(const InitScales& scales) override;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};

 private:
  int64_t n_heads_;
};
TORCH_MODULE(Attention);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_ATTENTION_H_
