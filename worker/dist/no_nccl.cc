// Built instead of nccl_communicator.cc when NCCL or the CUDA runtime is missing.
#include "absl/strings/str_cat.h"
#include "worker/dist/communicator.h"

namespace xmod {

bool NcclCompiledIn() { return false; }
int CudaDeviceCount() { return 0; }

nlohmann::json AcceleratorVersions(const std::string& device) {
  return {
      {"cuda", "none"}, {"nccl", "none"}, {"device", device == "cpu" ? CpuModelName() : device}};
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device) {
  return absl::UnimplementedError(
      absl::StrCat("this xmod was built without NCCL; cannot use cuda:", device));
}

}  // namespace xmod
