#include "worker/train/adamw.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <atomic>
#include <cmath>

#include "worker/model/fused_cpu.h"
#include "worker/model/row_kernel.h"

namespace xmod {

namespace {

std::atomic<int> g_fused{-1};  // -1: follow FusedCpuKernels()

// The optimizer state's key for a parameter: its TensorImpl, as a pointer on
// LibTorch 2.x and as that pointer's text on 1.13.
#if TORCH_VERSION_MAJOR >= 2
void* StateKey(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
std::string StateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

struct Coefficients {
  float decay;         // 1 − lr·wd
  float beta1, beta2;  // moment decay
  float one_minus_beta1, one_minus_beta2;
  float sqrt_bc2;   // √(1 − β2^t)
  float eps;        // added after the bias correction, as LibTorch does
  float step_size;  // lr / (1 − β1^t)
};

// The same order of operations as LibTorch's: decay, moments, then
// p + (−step_size)·m / (√v / √bc2 + eps).
XMOD_ROW_KERNEL void AdamWRange(float* p, const float* g, float* m, float* v, int64_t begin,
                                int64_t end, Coefficients c) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = m[i] * c.beta1 + gi * c.one_minus_beta1;
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * c.decay - c.step_size * (mi / (std::sqrt(vi) / c.sqrt_bc2 + c.eps));
  }
}

bool Fusable(const torch::Tensor& p) {
  if (!p.grad().defined()) return true;  // skipped, as LibTorch skips it
  const torch::Tensor& g = p.grad();
  return p.device().is_cpu() && p.scalar_type() == torch::kFloat32 && p.is_contiguous() &&
         !g.is_sparse() && g.scalar_type() == torch::kFloat32 && g.device().is_cpu();
}

}  // namespace

void SetFusedAdamW(bool on) { g_fused = on ? 1 : 0; }

torch::optim::AdamWParamState* AdamWStateOf(torch::optim::AdamW& optimizer,
                                            const torch::Tensor& p) {
  auto it = optimizer.state().find(StateKey(p));
  if (it == optimizer.state().end()) return nullptr;
  return static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

void SetAdamWState(torch::optim::AdamW& optimizer, const torch::Tensor& p, int64_t step,
                   torch::Tensor exp_avg, torch::Tensor exp_avg_sq) {
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(step);
  state->exp_avg(std::move(exp_avg));
  state->exp_avg_sq(std::move(exp_avg_sq));
  optimizer.state()[StateKey(p)] = std::move(state);
}

void AdamWStep(torch::optim::AdamW& optimizer) {
  const int fused = g_fused.load(std::memory_order_relaxed);
  bool fusable = fused < 0 ? FusedCpuKernels() : fused == 1;
  for (const auto& group : optimizer.param_groups()) {
    if (!fusable) break;
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) fusable = false;
    for (const auto& p : group.params()) fusable = fusable && Fusable(p);
  }
  if (!fusable) {
    optimizer.step();
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::optim::AdamWParamState* state = AdamWStateOf(optimizer, p);
      if (state == nullptr) {
        SetAdamWState(optimizer, p, 0, torch::zeros_like(p, torch::MemoryFormat::Preserve),
                      torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state = AdamWStateOf(optimizer, p);
      }
      // A state loaded from elsewhere may be strided; the kernel wants rows.
      if (!state->exp_avg().is_contiguous()) state->exp_avg(state->exp_avg().contiguous());
      if (!state->exp_avg_sq().is_contiguous()) {
        state->exp_avg_sq(state->exp_avg_sq().contiguous());
      }
      state->step(state->step() + 1);
      const double t = static_cast<double>(state->step());
      const double bc1 = 1.0 - std::pow(beta1, t);
      const double bc2 = 1.0 - std::pow(beta2, t);
      Coefficients c;
      c.decay = static_cast<float>(1.0 - o.lr() * o.weight_decay());
      c.beta1 = static_cast<float>(beta1);
      c.beta2 = static_cast<float>(beta2);
      c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
      c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
      c.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
      c.eps = static_cast<float>(o.eps());
      c.step_size = static_cast<float>(o.lr() / bc1);
      const torch::Tensor g = p.grad().contiguous();
      float* pp = p.data_ptr<float>();
      const float* gp = g.data_ptr<float>();
      float* mp = state->exp_avg().data_ptr<float>();
      float* vp = state->exp_avg_sq().data_ptr<float>();
      at::parallel_for(0, p.numel(), 32768, [&](int64_t begin, int64_t end) {
        AdamWRange(pp, gp, mp, vp, begin, end, c);
      });
    }
  }
}

}  // namespace xmod
