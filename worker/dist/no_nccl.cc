// Built instead of nccl_communicator.cc when NCCL or the CUDA runtime is missing.
#include "absl/strings/str_cat.h"
#include "worker/dist/communicator.h"

namespace xmod {

bool NcclCompiledIn() { return false; }
int CudaDeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(int device) {
  return absl::UnimplementedError(
      absl::StrCat("this xmod was built without NCCL; cannot use cuda:", device));
}

}  // namespace xmod
