// Hand-written CPU kernels for the elementwise work of a decoder block: RMSNorm,
// the rotary split of the fused q/k/v projection, and SwiGLU, each one pass
// forward and one backward (custom autograd functions). LibTorch runs these as
// chains of broadcast multiplies, concatenations and copies; on the benchmark
// model that chain was a third of a CPU training step (docs/performance.md).
//
// Each function computes the same values as its composite form (model.cc,
// experts.cc) up to float rounding, and falls back to that form where the kernel
// does not apply: a tensor that is not float32 on the CPU (bf16 under autocast,
// CUDA, float64), or FusedCpuKernels() switched off. Every function is safe to
// call from any thread; the kernels split their rows over LibTorch's intra-op
// threads (at::parallel_for).
#ifndef XMOD_WORKER_MODEL_FUSED_CPU_H_
#define XMOD_WORKER_MODEL_FUSED_CPU_H_

#include <torch/torch.h>

#include <array>

namespace xmod {

// Process-wide switch, on by default (off when the environment has
// XMOD_FUSED_CPU=0): off, every function below takes its composite form (for
// tests and benchmarks that compare the two). The fused AdamW (worker/train/
// adamw.h) follows it unless set on its own.
void SetFusedCpuKernels(bool on);
bool FusedCpuKernels();

// x · rsqrt(mean(x², last dim) + eps) · weight. x [..., d], weight [d].
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// silu(g) · u where gate_up [..., 2f] holds g in its first half and u in its
// second. Returns [..., f].
torch::Tensor Swiglu(const torch::Tensor& gate_up);

// The fused projection qkv [B, N, 3·d] (the last dimension is q, k, v, each as
// H heads of hd) to q, k, v, each [B, H, N, hd], with q and k rotated: the two
// halves (x1, x2) of each head become (x1·c − x2·s, x1·s + x2·c) for c, s of the
// token's angles. cos, sin [1 or B, N, hd / 2].
std::array<torch::Tensor, 3> SplitRotary(const torch::Tensor& qkv, const torch::Tensor& cos,
                                         const torch::Tensor& sin, int64_t n_heads);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_FUSED_CPU_H_
