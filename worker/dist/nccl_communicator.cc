// NCCL communicator: compiled only when CMake finds NCCL and the CUDA runtime.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/dist/communicator.h"

namespace xmod {
namespace {

ncclDataType_t NcclType(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kFloat16:
      return ncclFloat16;
    case torch::kInt64:
      return ncclInt64;
    default:
      return ncclInt32;
  }
}

class Nccl : public Communicator {
 public:
  Nccl(std::unique_ptr<Communicator> mpi, ncclComm_t comm, cudaStream_t stream, int device)
      : mpi_(std::move(mpi)), comm_(comm), stream_(stream), device_(device) {}
  ~Nccl() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  std::string Where() const override {
    return absl::StrCat(mpi_->Where(), " (cuda:", device_, ")");
  }
  absl::Status Broadcast(std::string* bytes, int root) override {
    return mpi_->Broadcast(bytes, root);
  }
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    return ForEachBucket(tensors, kBucketBytes, [&](torch::Tensor& flat) {
      cudaDeviceSynchronize();
      RETURN_IF_ERROR(Check(ncclBroadcast(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                          NcclType(flat.scalar_type()), root, comm_, stream_),
                            "broadcast"));
      return Sync();
    });
  }
  absl::Status AllReduceSum(std::vector<torch::Tensor>& tensors) override {
    return ForEachBucket(tensors, kBucketBytes, [&](torch::Tensor& flat) {
      if (!flat.is_cuda()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(), ": NCCL needs CUDA tensors"));
      }
      cudaDeviceSynchronize();
      RETURN_IF_ERROR(Check(ncclAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                          NcclType(flat.scalar_type()), ncclSum, comm_, stream_),
                            "all-reduce"));
      return Sync();
    });
  }
  absl::Status ReduceSum(std::vector<torch::Tensor>& tensors, int root) override {
    return ForEachBucket(tensors, kBucketBytes, [&](torch::Tensor& flat) {
      if (!flat.is_cuda()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(), ": NCCL needs CUDA tensors"));
      }
      cudaDeviceSynchronize();
      RETURN_IF_ERROR(Check(ncclReduce(flat.data_ptr(), flat.data_ptr(), flat.numel(),
                                       NcclType(flat.scalar_type()), ncclSum, root, comm_, stream_),
                            "reduce"));
      return Sync();
    });
  }
  absl::Status Barrier() override { return mpi_->Barrier(); }
  [[noreturn]] void Abort(int code) override {
    mpi_->Abort(code);
    std::exit(code);  // not reached: MPI_Abort ends the process
  }

 private:
  static constexpr int64_t kBucketBytes = 64 << 20;
  absl::Status Check(ncclResult_t rc, const char* what) const {
    if (rc == ncclSuccess) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat(Where(), ": NCCL ", what, ": ", ncclGetErrorString(rc)));
  }
  absl::Status Sync() const {
    const cudaError_t rc = cudaStreamSynchronize(stream_);
    if (rc == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(Where(), ": CUDA: ", cudaGetErrorString(rc)));
  }

  std::unique_ptr<Communicator> mpi_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
};

}  // namespace

bool NcclCompiledIn() { return true; }

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

nlohmann::json AcceleratorVersions(const std::string& device) {
  int runtime = 0, nccl = 0;
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  nlohmann::json j = {
      {"cuda", absl::StrCat(runtime / 1000, ".", (runtime % 1000) / 10)},
      {"nccl", absl::StrCat(nccl / 10000, ".", (nccl % 10000) / 100, ".", nccl % 100)}};
  if (device.rfind("cuda:", 0) == 0) {
    cudaDeviceProp prop;
    const int index = std::atoi(device.c_str() + 5);
    j["device"] =
        cudaGetDeviceProperties(&prop, index) == cudaSuccess ? std::string(prop.name) : device;
  } else {
    j["device"] = CpuModelName();
  }
  return j;
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device) {
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> mpi, MakeMpiCommunicator());
  if (device >= CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat(mpi->Where(), ": no CUDA device ", device,
                                                      " (", CudaDeviceCount(), " visible)"));
  }
  cudaSetDevice(device);
  ncclUniqueId id;
  if (mpi->rank() == 0) ncclGetUniqueId(&id);
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
  RETURN_IF_ERROR(mpi->Broadcast(&bytes, 0));
  std::memcpy(&id, bytes.data(), sizeof(id));
  ncclComm_t comm;
  const ncclResult_t rc = ncclCommInitRank(&comm, mpi->size(), id, mpi->rank());
  if (rc != ncclSuccess) {
    return absl::UnavailableError(
        absl::StrCat(mpi->Where(), ": ncclCommInitRank: ", ncclGetErrorString(rc)));
  }
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  return std::unique_ptr<Communicator>(new Nccl(std::move(mpi), comm, stream, device));
}

}  // namespace xmod
