#include "worker/model/fused_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "worker/model/row_kernel.h"

namespace xmod {

namespace {

// On unless XMOD_FUSED_CPU=0 is in the environment (a way out, without a
// rebuild, should a kernel misbehave on some machine).
bool OnByDefault() {
  const char* v = std::getenv("XMOD_FUSED_CPU");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::atomic<bool> g_fused{OnByDefault()};

// Rows per block of the weight-gradient reduction: fixed, so that the sum's
// order (and so its rounding) does not depend on the thread count.
constexpr int64_t kReduceBlock = 64;

bool Applies(const torch::Tensor& t) {
  return g_fused.load(std::memory_order_relaxed) && t.defined() && t.device().is_cpu() &&
         t.scalar_type() == torch::kFloat32;
}

// ---- RMSNorm ----------------------------------------------------------------

XMOD_ROW_KERNEL void RmsForwardRows(const float* x, const float* w, float* y, float* r,
                                    int64_t begin, int64_t end, int64_t d, float eps) {
  for (int64_t i = begin; i < end; ++i) {
    const float* xi = x + i * d;
    float* yi = y + i * d;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < d; ++j) ss += xi[j] * xi[j];
    const float ri = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    r[i] = ri;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) yi[j] = xi[j] * ri * w[j];
  }
}

// gx = r·(gy·w) − x·r³·mean(gy·w·x); the block's Σ gy·x·r goes to gw_block.
XMOD_ROW_KERNEL void RmsBackwardRows(const float* gy, const float* x, const float* w,
                                     const float* r, float* gx, float* gw_block, int64_t begin,
                                     int64_t end, int64_t d) {
  std::fill(gw_block, gw_block + d, 0.0f);
  for (int64_t i = begin; i < end; ++i) {
    const float* gi = gy + i * d;
    const float* xi = x + i * d;
    float* gxi = gx + i * d;
    const float ri = r[i];
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < d; ++j) dot += gi[j] * w[j] * xi[j];
    const float c = ri * ri * ri * dot / static_cast<float>(d);
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      gxi[j] = gi[j] * w[j] * ri - xi[j] * c;
      gw_block[j] += gi[j] * xi[j] * ri;
    }
  }
}

XMOD_ROW_KERNEL void SumBlocks(const float* blocks, float* out, int64_t n_blocks, int64_t begin,
                               int64_t end, int64_t d) {
  for (int64_t j = begin; j < end; ++j) out[j] = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* row = blocks + b * d;
#pragma omp simd
    for (int64_t j = begin; j < end; ++j) out[j] += row[j];
  }
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight, double eps) {
    const torch::Tensor x = x_in.contiguous();
    const torch::Tensor w = weight.contiguous();
    const int64_t d = x.size(-1);
    const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
    torch::Tensor y = torch::empty_like(x);
    torch::Tensor r = torch::empty({rows}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* rp = r.data_ptr<float>();
    const float e = static_cast<float>(eps);
    at::parallel_for(
        0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)),
        [&](int64_t begin, int64_t end) { RmsForwardRows(xp, wp, yp, rp, begin, end, d, e); });
    ctx->save_for_backward({x, w, r});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor& r = saved[2];
    const torch::Tensor gy = grad_out[0].contiguous();
    const int64_t d = x.size(-1);
    const int64_t rows = r.numel();
    const int64_t n_blocks = (rows + kReduceBlock - 1) / kReduceBlock;
    torch::Tensor gx = torch::empty_like(x);
    torch::Tensor blocks = torch::empty({n_blocks, d}, x.options());
    torch::Tensor gw = torch::empty({d}, x.options());
    const float* gyp = gy.data_ptr<float>();
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* rp = r.data_ptr<float>();
    float* gxp = gx.data_ptr<float>();
    float* bp = blocks.data_ptr<float>();
    at::parallel_for(0, n_blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        RmsBackwardRows(gyp, xp, wp, rp, gxp, bp + b * d, b * kReduceBlock,
                        std::min(rows, (b + 1) * kReduceBlock), d);
      }
    });
    float* gwp = gw.data_ptr<float>();
    at::parallel_for(
        0, d, 64, [&](int64_t begin, int64_t end) { SumBlocks(bp, gwp, n_blocks, begin, end, d); });
    return {gx, gw, torch::Tensor()};
  }
};

// ---- SwiGLU -----------------------------------------------------------------

XMOD_ROW_KERNEL void SwigluForwardRows(const float* gu, const float* s, float* h, int64_t begin,
                                       int64_t end, int64_t f) {
  for (int64_t i = begin; i < end; ++i) {
    const float* g = gu + i * 2 * f;
    const float* u = g + f;
    const float* si = s + i * f;
    float* hi = h + i * f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) hi[j] = g[j] * si[j] * u[j];
  }
}

// d silu(g)/dg = s·(1 + g·(1 − s)) for s = sigmoid(g).
XMOD_ROW_KERNEL void SwigluBackwardRows(const float* gh, const float* gu, const float* s,
                                        float* ggu, int64_t begin, int64_t end, int64_t f) {
  for (int64_t i = begin; i < end; ++i) {
    const float* g = gu + i * 2 * f;
    const float* u = g + f;
    const float* si = s + i * f;
    const float* ghi = gh + i * f;
    float* gg = ggu + i * 2 * f;
    float* gv = gg + f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) {
      const float silu = g[j] * si[j];
      gg[j] = ghi[j] * u[j] * si[j] * (1.0f + g[j] * (1.0f - si[j]));
      gv[j] = ghi[j] * silu;
    }
  }
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               const torch::Tensor& gate_up_in) {
    const torch::Tensor gu = gate_up_in.contiguous();
    const int64_t f = gu.size(-1) / 2;
    const int64_t rows = gu.numel() / std::max<int64_t>(2 * f, 1);
    // LibTorch's vectorised sigmoid; the products are fused below.
    const torch::Tensor s = torch::sigmoid(gu.narrow(-1, 0, f)).contiguous();
    std::vector<int64_t> shape = gu.sizes().vec();
    shape.back() = f;
    torch::Tensor h = torch::empty(shape, gu.options());
    const float* gp = gu.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    float* hp = h.data_ptr<float>();
    at::parallel_for(
        0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(f, 1)),
        [&](int64_t begin, int64_t end) { SwigluForwardRows(gp, sp, hp, begin, end, f); });
    ctx->save_for_backward({gu});
    return h;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const torch::Tensor gu = ctx->get_saved_variables()[0];
    const torch::Tensor gh = grad_out[0].contiguous();
    const int64_t f = gu.size(-1) / 2;
    const int64_t rows = gu.numel() / std::max<int64_t>(2 * f, 1);
    // Recomputed rather than saved: one vectorised pass against [rows, f] floats
    // kept per layer until the backward.
    const torch::Tensor s = torch::sigmoid(gu.narrow(-1, 0, f)).contiguous();
    torch::Tensor ggu = torch::empty_like(gu);
    const float* ghp = gh.data_ptr<float>();
    const float* gp = gu.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    float* op = ggu.data_ptr<float>();
    at::parallel_for(
        0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(f, 1)),
        [&](int64_t begin, int64_t end) { SwigluBackwardRows(ghp, gp, sp, op, begin, end, f); });
    return {ggu};
  }
};

// ---- q, k, v split with rotary angles ---------------------------------------

// One token row (b, n) of qkv [3·H·hd] into q, k, v [B, H, N, hd]; q and k rotated.
XMOD_ROW_KERNEL void SplitRotaryRows(const float* qkv, const float* cos, const float* sin, float* q,
                                     float* k, float* v, int64_t begin, int64_t end,
                                     int64_t n_tokens, int64_t heads, int64_t hd,
                                     bool angles_per_batch) {
  const int64_t half = hd / 2;
  const int64_t d = heads * hd;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / n_tokens, n = row % n_tokens;
    const float* src = qkv + row * 3 * d;
    const int64_t angle_row = angles_per_batch ? row : n;
    const float* c = cos + angle_row * half;
    const float* s = sin + angle_row * half;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t dst = ((b * heads + h) * n_tokens + n) * hd;
      for (int part = 0; part < 2; ++part) {
        const float* x = src + part * d + h * hd;
        float* y = (part == 0 ? q : k) + dst;
#pragma omp simd
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = x[j], x2 = x[j + half];
          y[j] = x1 * c[j] - x2 * s[j];
          y[j + half] = x1 * s[j] + x2 * c[j];
        }
      }
      std::memcpy(v + dst, src + 2 * d + h * hd, static_cast<size_t>(hd) * sizeof(float));
    }
  }
}

// The transpose: gx1 = g1·c + g2·s, gx2 = g2·c − g1·s, and v's gradient copied.
XMOD_ROW_KERNEL void SplitRotaryBackwardRows(const float* gq, const float* gk, const float* gv,
                                             const float* cos, const float* sin, float* gqkv,
                                             int64_t begin, int64_t end, int64_t n_tokens,
                                             int64_t heads, int64_t hd, bool angles_per_batch) {
  const int64_t half = hd / 2;
  const int64_t d = heads * hd;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / n_tokens, n = row % n_tokens;
    float* dst = gqkv + row * 3 * d;
    const int64_t angle_row = angles_per_batch ? row : n;
    const float* c = cos + angle_row * half;
    const float* s = sin + angle_row * half;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t src = ((b * heads + h) * n_tokens + n) * hd;
      for (int part = 0; part < 2; ++part) {
        const float* g = (part == 0 ? gq : gk) + src;
        float* y = dst + part * d + h * hd;
#pragma omp simd
        for (int64_t j = 0; j < half; ++j) {
          const float g1 = g[j], g2 = g[j + half];
          y[j] = g1 * c[j] + g2 * s[j];
          y[j + half] = g2 * c[j] - g1 * s[j];
        }
      }
      std::memcpy(dst + 2 * d + h * hd, gv + src, static_cast<size_t>(hd) * sizeof(float));
    }
  }
}

class SplitRotaryFunction : public torch::autograd::Function<SplitRotaryFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& qkv_in,
                                                const torch::Tensor& cos_in,
                                                const torch::Tensor& sin_in, int64_t heads) {
    const torch::Tensor qkv = qkv_in.contiguous();
    const torch::Tensor cos = cos_in.contiguous();
    const torch::Tensor sin = sin_in.contiguous();
    const int64_t b = qkv.size(0), n = qkv.size(1), d = qkv.size(2) / 3;
    const int64_t hd = d / heads;
    const bool per_batch = cos.size(0) != 1;
    const auto opts = qkv.options();
    torch::Tensor q = torch::empty({b, heads, n, hd}, opts);
    torch::Tensor k = torch::empty({b, heads, n, hd}, opts);
    torch::Tensor v = torch::empty({b, heads, n, hd}, opts);
    const float* src = qkv.data_ptr<float>();
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    at::parallel_for(0, b * n, std::max<int64_t>(1, 8192 / std::max<int64_t>(3 * d, 1)),
                     [&](int64_t begin, int64_t end) {
                       SplitRotaryRows(src, cp, sp, qp, kp, vp, begin, end, n, heads, hd,
                                       per_batch);
                     });
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["b"] = b;
    ctx->saved_data["n"] = n;
    return {q, k, v};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& cos = saved[0];
    const torch::Tensor& sin = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const int64_t b = ctx->saved_data["b"].toInt();
    const int64_t n = ctx->saved_data["n"].toInt();
    const int64_t hd = cos.size(-1) * 2;
    const int64_t d = heads * hd;
    const auto opts = cos.options();
    const auto Grad = [&](const torch::Tensor& g) {
      return g.defined() ? g.contiguous() : torch::zeros({b, heads, n, hd}, opts);
    };
    const torch::Tensor gq = Grad(grad_out[0]), gk = Grad(grad_out[1]), gv = Grad(grad_out[2]);
    torch::Tensor gqkv = torch::empty({b, n, 3 * d}, opts);
    const bool per_batch = cos.size(0) != 1;
    const float *gqp = gq.data_ptr<float>(), *gkp = gk.data_ptr<float>(),
                *gvp = gv.data_ptr<float>();
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    float* op = gqkv.data_ptr<float>();
    at::parallel_for(0, b * n, std::max<int64_t>(1, 8192 / std::max<int64_t>(3 * d, 1)),
                     [&](int64_t begin, int64_t end) {
                       SplitRotaryBackwardRows(gqp, gkp, gvp, cp, sp, op, begin, end, n, heads, hd,
                                               per_batch);
                     });
    return {gqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The composite forms: what the model computed before these kernels, and what
// it computes where they do not apply.
torch::Tensor CompositeRotate(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half);
  const torch::Tensor x2 = x.narrow(-1, half, half);
  // In x's dtype: under bf16 autocast q and k stay bf16 (fp32 angles would
  // promote them to fp32 copies, twice the memory, cast back for the matmul).
  const torch::Tensor c = cos.unsqueeze(1).to(x.scalar_type());
  const torch::Tensor s = sin.unsqueeze(1).to(x.scalar_type());
  return torch::cat({x1 * c - x2 * s, x1 * s + x2 * c}, -1);
}

}  // namespace

void SetFusedCpuKernels(bool on) { g_fused = on; }
bool FusedCpuKernels() { return g_fused; }

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (Applies(x) && Applies(weight) && x.size(-1) == weight.numel() && x.numel() > 0) {
    return RmsNormFunction::apply(x, weight, eps);
  }
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

torch::Tensor Swiglu(const torch::Tensor& gate_up) {
  if (Applies(gate_up) && gate_up.size(-1) % 2 == 0 && gate_up.numel() > 0) {
    return SwigluFunction::apply(gate_up);
  }
  auto parts = gate_up.chunk(2, -1);
  return torch::silu(parts[0]) * parts[1];
}

std::array<torch::Tensor, 3> SplitRotary(const torch::Tensor& qkv, const torch::Tensor& cos,
                                         const torch::Tensor& sin, int64_t n_heads) {
  const int64_t b = qkv.size(0), n = qkv.size(1), d = qkv.size(2) / 3;
  const int64_t hd = d / n_heads;
  if (Applies(qkv) && Applies(cos) && Applies(sin) && qkv.dim() == 3 && cos.dim() == 3 &&
      cos.sizes() == sin.sizes() && (cos.size(0) == 1 || cos.size(0) == b) && cos.size(1) == n &&
      cos.size(2) * 2 == hd && qkv.numel() > 0) {
    auto out = SplitRotaryFunction::apply(qkv, cos, sin, n_heads);
    return {out[0], out[1], out[2]};
  }
  auto parts = qkv.view({b, n, 3, n_heads, hd}).permute({2, 0, 3, 1, 4}).unbind(0);
  return {CompositeRotate(parts[0], cos, sin), CompositeRotate(parts[1], cos, sin), parts[2]};
}

}  // namespace xmod
