// One AdamW step over a torch::optim::AdamW's parameters and state, with the
// per-element update fused into one pass (hand-written CPU kernel), and the
// helpers that reach that optimizer's per-parameter state on LibTorch 1.13 and 2.x.
//
// LibTorch's AdamW::step runs six tensor operations per parameter (decay,
// two moment updates, square root, division, addcdiv), each a pass over memory;
// on the benchmark model that was 2% of a dense CPU step and 4% of an X-MoD one.
// The state (step, exp_avg, exp_avg_sq) lives where LibTorch keeps it, so
// checkpoints (torch::save of the optimizer) are unchanged.
#ifndef XMOD_WORKER_TRAIN_ADAMW_H_
#define XMOD_WORKER_TRAIN_ADAMW_H_

#include <torch/torch.h>

namespace xmod {

// What torch::optim::AdamW::step() does (amsgrad aside), with the same state:
// for each parameter with a gradient, in group order, p ← p·(1 − lr·wd), the
// moments and step advance, p ← p − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + eps).
// Float32 CPU parameters with dense gradients take the fused kernel; anything
// else (CUDA, other dtypes, amsgrad, sparse gradients) calls optimizer.step().
// The values equal LibTorch's to float rounding (not bit for bit). Not thread-safe
// with other users of the optimizer.
void AdamWStep(torch::optim::AdamW& optimizer);

// Process-wide switch: off, AdamWStep is optimizer.step() (for tests and
// benchmarks that compare the two). Until set, it follows FusedCpuKernels().
void SetFusedAdamW(bool on);

// The state LibTorch keeps for p, or nullptr before its first step.
torch::optim::AdamWParamState* AdamWStateOf(torch::optim::AdamW& optimizer, const torch::Tensor& p);
// Replaces p's state.
void SetAdamWState(torch::optim::AdamW& optimizer, const torch::Tensor& p, int64_t step,
                   torch::Tensor exp_avg, torch::Tensor exp_avg_sq);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_ADAMW_H_
