#include "worker/train/zero.h"

#include <cmath>

#include "common/status_macros.h"
#include "worker/train/adamw.h"

namespace xmod {

std::vector<int> ShardOwners(const std::vector<int64_t>& numels, int ranks) {
  double total = 0;
  for (int64_t n : numels) total += static_cast<double>(n);
  std::vector<int> owners;
  double before = 0;
  for (int64_t n : numels) {
    const double middle = before + 0.5 * static_cast<double>(n);
    const int r = total > 0 ? static_cast<int>(middle * ranks / total) : 0;
    owners.push_back(std::min(ranks - 1, std::max(owners.empty() ? 0 : owners.back(), r)));
    before += static_cast<double>(n);
  }
  return owners;
}

ShardedAdamW::ShardedAdamW(std::vector<torch::Tensor> params, Communicator& comm, AdamWFactory make)
    : params_(std::move(params)), comm_(comm), make_(std::move(make)) {
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  owners_ = ShardOwners(numels, comm_.size());
  runs_.resize(comm_.size());
  for (size_t i = 0; i < params_.size(); ++i) runs_[owners_[i]].push_back(params_[i]);
  local_ = make_(Run(comm_.rank()));
}

absl::StatusOr<double> ShardedAdamW::Step(double max_norm, bool update) {
  const int me = comm_.rank();
  // 1. Gradients onto their owners.
  for (int r = 0; r < comm_.size(); ++r) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : Run(r)) grads.push_back(p.grad());
    if (!grads.empty()) RETURN_IF_ERROR(comm_.ReduceSum(grads, r));
  }
  // 2. The global norm from the owned gradients.
  const torch::Device device = params_.front().device();
  torch::Tensor squares = torch::zeros({1}, torch::dtype(torch::kFloat64).device(device));
  const std::vector<torch::Tensor>& mine = Run(me);
  for (const auto& p : mine) squares += p.grad().to(torch::kFloat64).pow(2).sum();
  std::vector<torch::Tensor> list{squares};
  RETURN_IF_ERROR(comm_.AllReduceSum(list));
  const double norm = std::sqrt(squares.cpu().item<double>());
  if (!update || !std::isfinite(norm)) return norm;
  if (max_norm > 0) {
    // As torch::nn::utils::clip_grad_norm_ does: scale when above the bound.
    const double scale = max_norm / (norm + 1e-6);
    if (scale < 1.0) {
      for (const auto& p : mine) p.grad().mul_(scale);
    }
  }
  // 3. The owners' update; 4. every parameter from its owner.
  AdamWStep(*local_);
  for (int r = 0; r < comm_.size(); ++r) {
    std::vector<torch::Tensor> data;
    for (const auto& p : Run(r)) data.push_back(p.data());
    if (!data.empty()) RETURN_IF_ERROR(comm_.Broadcast(data, r));
  }
  return norm;
}

absl::StatusOr<std::unique_ptr<torch::optim::AdamW>> ShardedAdamW::Gather() {
  const int me = comm_.rank();
  std::unique_ptr<torch::optim::AdamW> full = me == 0 ? make_(params_) : nullptr;
  const torch::Device device = params_.front().device();
  for (int r = 0; r < comm_.size(); ++r) {
    const std::vector<torch::Tensor>& run = Run(r);
    if (run.empty()) continue;
    // The run's steps (0: no state yet), then both moments of each parameter.
    torch::Tensor steps =
        torch::zeros({static_cast<int64_t>(run.size())}, torch::dtype(torch::kFloat64));
    std::vector<torch::Tensor> moments;
    for (size_t i = 0; i < run.size(); ++i) {
      torch::optim::AdamWParamState* state = me == r ? AdamWStateOf(*local_, run[i]) : nullptr;
      if (state != nullptr) {
        steps[static_cast<int64_t>(i)] = static_cast<double>(state->step());
        moments.push_back(state->exp_avg().contiguous());
        moments.push_back(state->exp_avg_sq().contiguous());
      } else {
        moments.push_back(torch::zeros_like(run[i]));
        moments.push_back(torch::zeros_like(run[i]));
      }
    }
    std::vector<torch::Tensor> step_list{steps.to(device)};
    RETURN_IF_ERROR(comm_.Broadcast(step_list, r));
    RETURN_IF_ERROR(comm_.Broadcast(moments, r));
    if (me == 0) {
      const torch::Tensor counts = step_list[0].cpu();
      for (size_t i = 0; i < run.size(); ++i) {
        const auto step = static_cast<int64_t>(counts[static_cast<int64_t>(i)].item<double>());
        if (step == 0) continue;
        SetAdamWState(*full, run[i], step, moments[2 * i].cpu().clone(),
                      moments[2 * i + 1].cpu().clone());
      }
    }
  }
  return full;
}

void ShardedAdamW::TakeShard(torch::optim::AdamW& full) {
  local_->state().clear();
  for (const auto& p : Run(comm_.rank())) {
    torch::optim::AdamWParamState* state = AdamWStateOf(full, p);
    if (state == nullptr) continue;
    SetAdamWState(*local_, p, state->step(), state->exp_avg().to(p.device()).clone(),
                  state->exp_avg_sq().to(p.device()).clone());
  }
}

void MoveOptimizerStateToParameters(torch::optim::AdamW& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      torch::optim::AdamWParamState* state = AdamWStateOf(optimizer, p);
      if (state == nullptr || state->exp_avg().device() == p.device()) continue;
      state->exp_avg(state->exp_avg().to(p.device()));
      state->exp_avg_sq(state->exp_avg_sq().to(p.device()));
    }
  }
}

}  // namespace xmod
