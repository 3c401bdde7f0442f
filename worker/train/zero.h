// ZeRO stage 1: AdamW's moments split over the data-parallel ranks.
//
// The parameters (in the model's order) are cut into one contiguous run per
// rank with about equal numbers of elements; a parameter is never split. Each
// rank keeps an AdamW over its run only. A step then goes:
//   1. every gradient is summed onto its owner (Communicator::ReduceSum, one
//      bucketed reduce per rank: a reduce-scatter at parameter granularity);
//   2. the global gradient norm is the square root of the ranks' summed squares
//      of their owned gradients (fp64), and the owned gradients are clipped by it;
//   3. each owner updates its parameters;
//   4. every parameter is broadcast from its owner (an all-gather at parameter
//      granularity).
// That moves the bytes of one all-reduce, as ZeRO-1 does, and holds 8P/R bytes
// of moments per rank instead of 8P. Checkpoints keep the unsharded format: the
// moments are gathered to rank 0 through host memory one rank's run at a time,
// so a checkpoint resumes on any number of ranks, sharded or not.
#ifndef XMOD_WORKER_TRAIN_ZERO_H_
#define XMOD_WORKER_TRAIN_ZERO_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/dist/communicator.h"

namespace xmod {

// Owner rank of each parameter: contiguous runs with about equal element counts
// (the parameter whose middle element falls in rank r's equal share goes to r).
std::vector<int> ShardOwners(const std::vector<int64_t>& numels, int ranks);

// Builds an AdamW over the given parameters (the trainer's groups and settings).
using AdamWFactory =
    std::function<std::unique_ptr<torch::optim::AdamW>(const std::vector<torch::Tensor>&)>;

class ShardedAdamW {
 public:
  ShardedAdamW(std::vector<torch::Tensor> params, Communicator& comm, AdamWFactory make);

  // This rank's AdamW (its learning rate is set through it).
  torch::optim::AdamW& local() { return *local_; }
  // Steps 1–4 above, collectively. Every gradient must be defined. Returns the
  // global norm before clipping; max_norm <= 0 does not clip. When `update` is
  // false or the norm is not finite nothing is updated (every rank decides alike).
  absl::StatusOr<double> Step(double max_norm, bool update);
  // The full optimizer over every parameter, with every rank's moments, on rank 0
  // (its moments on the host); nullptr on the others. Collective.
  absl::StatusOr<std::unique_ptr<torch::optim::AdamW>> Gather();
  // Takes this rank's moments from `full`, an AdamW over the same parameters
  // (as loaded from a checkpoint), onto the parameters' device.
  void TakeShard(torch::optim::AdamW& full);

  int owner(size_t param) const { return owners_[param]; }

 private:
  // The parameters rank `rank` owns, in model order.
  const std::vector<torch::Tensor>& Run(int rank) const { return runs_[rank]; }

  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  AdamWFactory make_;
  std::vector<int> owners_;
  std::vector<std::vector<torch::Tensor>> runs_;  // per rank, cut once at construction
  std::unique_ptr<torch::optim::AdamW> local_;
};

// Moves every moment of `optimizer` to its parameter's device (a checkpoint
// written from a sharded run keeps them on the host).
void MoveOptimizerStateToParameters(torch::optim::AdamW& optimizer);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_ZERO_H_
