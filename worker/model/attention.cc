#include "worker/model/attention.h"

#include <torch/version.h>

#include <atomic>
#include <cmath>
#include <limits>

#include "worker/model/fused_cpu.h"
#include "worker/model/precision.h"

#if TORCH_VERSION_MAJOR >= 2
#define XMOD_HAVE_SDPA 1
#else
#define XMOD_HAVE_SDPA 0
#endif

namespace xmod {

namespace {
std::atomic<AttentionPath> g_attention_path{AttentionPath::kAuto};
}  // namespace

bool HaveFusedAttention() { return XMOD_HAVE_SDPA != 0; }

void SetAttentionPath(AttentionPath path) {
  TORCH_CHECK(path != AttentionPath::kFused || HaveFusedAttention(),
              "fused attention needs LibTorch 2.0 or later; this is ", TORCH_VERSION);
  g_attention_path = path;
}

AttentionPath CurrentAttentionPath() { return g_attention_path; }

AttentionPath ResolvedAttentionPath(const torch::Device& device) {
  const AttentionPath path = g_attention_path;
  if (path != AttentionPath::kAuto) return path;
  if (!HaveFusedAttention()) return AttentionPath::kEager;
  return device.is_cpu() && AutocastEnabled(device) ? AttentionPath::kEager : AttentionPath::kFused;
}

const char* AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto:
      return "auto";
    case AttentionPath::kFused:
      return "fused";
    case AttentionPath::kEager:
      return "eager";
  }
  return "?";
}

AttentionImpl::AttentionImpl(int64_t d_model, int64_t n_heads) : n_heads_(n_heads) {
  qkv = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(d_model, 3 * d_model).bias(false)));
  proj = register_module("proj",
                         torch::nn::Linear(torch::nn::LinearOptions(d_model, d_model).bias(false)));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const TokenPositions& at) {
  const torch::Tensor& allowed = at.allowed;
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  const int64_t hd = d / n_heads_;
  // [B, N, 3d] -> 3 x [B, H, N, hd], q and k rotated
  auto parts = SplitRotary(qkv(x), at.cos, at.sin, n_heads_);
  const torch::Tensor& q = parts[0];
  const torch::Tensor& k = parts[1];
  torch::Tensor out;  // [B, H, N, hd]
#if XMOD_HAVE_SDPA
  if (ResolvedAttentionPath(x.device()) == AttentionPath::kFused) {
    // Tokens come in increasing position order, so causal is the plain lower
    // triangle; a boolean mask is true where attending is allowed, as `allowed`.
    out = allowed.defined() ? at::scaled_dot_product_attention(q, k, parts[2], allowed)
                            : at::scaled_dot_product_attention(q, k, parts[2], {}, 0.0,
                                                               /*is_causal=*/true);
  }
#endif
  if (!out.defined()) {
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    if (allowed.defined()) {
      scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    } else {
      // Tokens come in increasing position order, so causal means j <= i.
      const torch::Tensor future =
          torch::ones({n, n}, torch::dtype(torch::kBool).device(x.device())).triu(1);
      scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    out = torch::matmul(torch::softmax(scores, -1), parts[2]);
  }
  return proj(out.transpose(1, 2).reshape({b, n, d}));
}

void AttentionImpl::InitWeights(const InitScales& scales) {
  qkv->weight.normal_(0.0, scales.std);
  proj->weight.normal_(0.0, scales.out_std);
}

}  // namespace xmod
