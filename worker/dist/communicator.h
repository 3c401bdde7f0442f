// The collective operations a worker group needs: rank and size, broadcast of
// bytes (the job) and tensors (initial weights), an all-reduce sum over a list of
// tensors done as flattened buckets (the gradients), and a barrier.
// Implementations: single process, MPI (CPU tensors), NCCL (CUDA tensors; the
// unique id travels over MPI). Errors name the host and rank.
#ifndef XMOD_WORKER_DIST_COMMUNICATOR_H_
#define XMOD_WORKER_DIST_COMMUNICATOR_H_

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xmod {

// Not thread-safe: collectives are called from the training thread only, in the
// same order on every rank.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank `root`'s bytes replace everyone's.
  virtual absl::Status Broadcast(std::string* bytes, int root) = 0;
  // Rank `root`'s values replace everyone's, in place. Tensors must be contiguous.
  virtual absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) = 0;
  // Element-wise sum over ranks, in place. Tensors of one dtype; they are packed
  // into buckets of at most `bucket_bytes` so that each bucket is one collective.
  virtual absl::Status AllReduceSum(std::vector<torch::Tensor>& tensors) = 0;
  // Element-wise sum over ranks onto rank `root`, in place there (bucketed as
  // AllReduceSum); the other ranks' tensors are left unspecified.
  virtual absl::Status ReduceSum(std::vector<torch::Tensor>& tensors, int root) = 0;
  virtual absl::Status Barrier() = 0;
  // "host:rank", for messages.
  virtual std::string Where() const = 0;
  // Ends every rank of the world (for an error one rank cannot share with the
  // others without risking a hang). Does not return.
  [[noreturn]] virtual void Abort(int code) = 0;
};

// A world of one: every collective is a no-op.
std::unique_ptr<Communicator> MakeSingleProcessCommunicator();

// MPI_COMM_WORLD. Initialises MPI if needed (and finalises it at exit if it did).
// FAILED_PRECONDITION when MPI cannot be initialised.
// With pack_ranks > 0 (smaller than the launch), the launch is split
// (MPI_Comm_split) into sub-groups of pack_ranks consecutive ranks and the
// communicator spans this process's sub-group only; INVALID_ARGUMENT when it does
// not divide the launch. A sub-group's Abort still ends the whole launch.
absl::StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(int64_t bucket_bytes = 64 << 20,
                                                                  int pack_ranks = 0);

// Whether this build has the NCCL communicator, and whether a CUDA device is visible.
bool NcclCompiledIn();
int CudaDeviceCount();

// The accelerator side of this build and machine: {"cuda": runtime version or
// "none", "nccl": version or "none", "device": the name of `device` ("cuda:N":
// the GPU's; "cpu": the processor's model name from /proc/cpuinfo)}.
nlohmann::json AcceleratorVersions(const std::string& device);

// Everything a result depends on besides the job file: this build (build_info.h),
// LibTorch's version, the MPI library's (its first line) and AcceleratorVersions.
// Sent to the coordinator at registration and kept per attempt.
nlohmann::json WorkerBuild(const std::string& device);

// What `--version` prints for a worker binary: VersionLine(name), then LibTorch,
// MPI, CUDA and NCCL, then the device.
std::string WorkerVersionText(const std::string& name, const std::string& device);

// The processor's model name (/proc/cpuinfo), or "unknown CPU".
std::string CpuModelName();

// NCCL over MPI_COMM_WORLD on device `device` (usually the local rank). UNIMPLEMENTED
// when built without NCCL; FAILED_PRECONDITION without a GPU.
absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device);

// Applies `fn` to the flattened buckets of `tensors` (same dtype and device), each
// at most `bucket_bytes`, copying the results back. Shared by the implementations.
absl::Status ForEachBucket(std::vector<torch::Tensor>& tensors, int64_t bucket_bytes,
                           const std::function<absl::Status(torch::Tensor&)>& fn);

}  // namespace xmod

#endif  // XMOD_WORKER_DIST_COMMUNICATOR_H_
