#include "worker/dist/communicator.h"

#include <mpi.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/version/build_info.h"

namespace xmod {

absl::Status ForEachBucket(std::vector<torch::Tensor>& tensors, int64_t bucket_bytes,
                           const std::function<absl::Status(torch::Tensor&)>& fn) {
  size_t begin = 0;
  while (begin < tensors.size()) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < tensors.size() &&
           (end == begin || bytes + tensors[end].nbytes() <= static_cast<size_t>(bucket_bytes))) {
      bytes += tensors[end].nbytes();
      ++end;
    }
    std::vector<torch::Tensor> views;
    for (size_t i = begin; i < end; ++i) views.push_back(tensors[i].reshape({-1}));
    torch::Tensor flat = torch::cat(views);
    RETURN_IF_ERROR(fn(flat));
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const int64_t n = tensors[i].numel();
      tensors[i].copy_(flat.narrow(0, offset, n).view_as(tensors[i]));
      offset += n;
    }
    begin = end;
  }
  return absl::OkStatus();
}

namespace {

std::string HostName() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

class SingleProcess : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status Broadcast(std::string*, int) override { return absl::OkStatus(); }
  absl::Status Broadcast(std::vector<torch::Tensor>&, int) override { return absl::OkStatus(); }
  absl::Status AllReduceSum(std::vector<torch::Tensor>&) override { return absl::OkStatus(); }
  absl::Status ReduceSum(std::vector<torch::Tensor>&, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  std::string Where() const override { return HostName() + ":0"; }
  [[noreturn]] void Abort(int code) override { std::exit(code); }
};

MPI_Datatype MpiType(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return MPI_FLOAT;
    case torch::kFloat64:
      return MPI_DOUBLE;
    case torch::kInt64:
      return MPI_INT64_T;
    case torch::kInt32:
      return MPI_INT32_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

class Mpi : public Communicator {
 public:
  // Over `comm` (comm_, or one sub-group of it); `world_rank` names the
  // process in messages.
  Mpi(MPI_Comm comm, int rank, int size, int world_rank, int64_t bucket_bytes)
      : comm_(comm),
        rank_(rank),
        size_(size),
        world_rank_(world_rank),
        bucket_bytes_(bucket_bytes),
        host_(HostName()) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Where() const override { return absl::StrCat(host_, ":", world_rank_); }

  // Waits by polling a non-blocking broadcast, sleeping more the longer it waits:
  // ranks idling while rank 0 talks to the coordinator must not spin on a core
  // that another group's training needs.
  absl::Status Broadcast(std::string* bytes, int root) override {
    int64_t n = static_cast<int64_t>(bytes->size());
    RETURN_IF_ERROR(
        Wait([&](MPI_Request* r) { return MPI_Ibcast(&n, 1, MPI_INT64_T, root, comm_, r); }));
    bytes->resize(static_cast<size_t>(n));
    return Wait([&](MPI_Request* r) {
      return MPI_Ibcast(bytes->data(), static_cast<int>(n), MPI_CHAR, root, comm_, r);
    });
  }

  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    return ForEachBucket(tensors, bucket_bytes_, [&](torch::Tensor& flat) {
      RETURN_IF_ERROR(CheckType(flat));
      return Check(MPI_Bcast(flat.data_ptr(), static_cast<int>(flat.numel()),
                             MpiType(flat.scalar_type()), root, comm_),
                   "broadcast");
    });
  }

  absl::Status AllReduceSum(std::vector<torch::Tensor>& tensors) override {
    if (size_ == 1) return absl::OkStatus();
    return ForEachBucket(tensors, bucket_bytes_, [&](torch::Tensor& flat) {
      RETURN_IF_ERROR(CheckType(flat));
      return Check(MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr(), static_cast<int>(flat.numel()),
                                 MpiType(flat.scalar_type()), MPI_SUM, comm_),
                   "all-reduce");
    });
  }

  absl::Status ReduceSum(std::vector<torch::Tensor>& tensors, int root) override {
    if (size_ == 1) return absl::OkStatus();
    return ForEachBucket(tensors, bucket_bytes_, [&](torch::Tensor& flat) {
      RETURN_IF_ERROR(CheckType(flat));
      void* data = flat.data_ptr();
      const int n = static_cast<int>(flat.numel());
      const MPI_Datatype type = MpiType(flat.scalar_type());
      return Check(rank_ == root ? MPI_Reduce(MPI_IN_PLACE, data, n, type, MPI_SUM, root, comm_)
                                 : MPI_Reduce(data, nullptr, n, type, MPI_SUM, root, comm_),
                   "reduce");
    });
  }

  absl::Status Barrier() override { return Check(MPI_Barrier(comm_), "barrier"); }

  [[noreturn]] void Abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);  // a sub-group cannot end alone: the whole launch ends
    std::exit(code);
  }

 private:
  absl::Status Wait(const std::function<int(MPI_Request*)>& start) const {
    MPI_Request request;
    RETURN_IF_ERROR(Check(start(&request), "broadcast"));
    int done = 0;
    for (int spins = 0;; ++spins) {
      RETURN_IF_ERROR(Check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "broadcast"));
      if (done) return absl::OkStatus();
      if (spins > 1000) {
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 5000 ? 20000 : 200));
      }
    }
  }

  absl::Status Check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return absl::OkStatus();
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return absl::UnavailableError(
        absl::StrCat(Where(), ": MPI ", what, ": ", std::string(text, len)));
  }
  absl::Status CheckType(const torch::Tensor& t) const {
    if (t.is_cuda() || MpiType(t.scalar_type()) == MPI_DATATYPE_NULL) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": the MPI communicator takes CPU float32/float64/int32/int64 tensors"));
    }
    return absl::OkStatus();
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  int world_rank_;
  int64_t bucket_bytes_;
  std::string host_;
};

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

std::unique_ptr<Communicator> MakeSingleProcessCommunicator() {
  return std::make_unique<SingleProcess>();
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeMpiCommunicator(int64_t bucket_bytes,
                                                                  int pack_ranks) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      return absl::FailedPreconditionError(absl::StrCat(HostName(), ": MPI_Init failed"));
    }
    std::atexit(FinalizeMpi);
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (pack_ranks <= 0 || pack_ranks == size) {
    return std::unique_ptr<Communicator>(new Mpi(MPI_COMM_WORLD, rank, size, rank, bucket_bytes));
  }
  if (size % pack_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(HostName(), ":", rank, ": --pack ", pack_ranks,
                                                   " does not divide the ", size,
                                                   " ranks of this launch into whole sub-groups"));
  }
  // Consecutive world ranks form a sub-group (ranks on one node stay together
  // under mpirun's default by-core mapping).
  MPI_Comm sub = MPI_COMM_NULL;
  if (MPI_Comm_split(MPI_COMM_WORLD, rank / pack_ranks, rank, &sub) != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat(HostName(), ":", rank, ": MPI_Comm_split failed"));
  }
  int sub_rank = 0, sub_size = 1;
  MPI_Comm_rank(sub, &sub_rank);
  MPI_Comm_size(sub, &sub_size);
  return std::unique_ptr<Communicator>(new Mpi(sub, sub_rank, sub_size, rank, bucket_bytes));
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "unknown CPU";
}

nlohmann::json WorkerBuild(const std::string& device) {
  nlohmann::json j = BuildJson(ThisBuild());
  j["libtorch"] = TORCH_VERSION;
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi, &length);
  // Its first line up to the first comma: "Open MPI v4.1.4", "MPICH Version: 4.0".
  std::string first(mpi, strnlen(mpi, static_cast<size_t>(std::max(length, 0))));
  first = first.substr(0, first.find_first_of(",\r\n"));
  j["mpi"] = first;
  const nlohmann::json accelerator = AcceleratorVersions(device);
  for (const auto& [key, value] : accelerator.items()) j[key] = value;
  return j;
}

std::string WorkerVersionText(const std::string& name, const std::string& device) {
  const nlohmann::json b = WorkerBuild(device);
  return absl::StrCat(VersionLine(name), "\nLibTorch ", b["libtorch"].get<std::string>(), ", ",
                      b["mpi"].get<std::string>(), ", CUDA ", b["cuda"].get<std::string>(),
                      ", NCCL ", b["nccl"].get<std::string>(), "\ndevice ", device, ": ",
                      b["device"].get<std::string>());
}

}  // namespace xmod
