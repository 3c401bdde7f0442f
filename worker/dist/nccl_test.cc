// Runs only where NCCL is compiled in and a CUDA device and a CUDA LibTorch are
// present; everywhere else each test reports itself skipped.
#include <gtest/gtest.h>

#include "worker/dist/communicator.h"

namespace xmod {
namespace {

TEST(Nccl, AllReduceOverOneRankKeepsTheValues) {
  if (!NcclCompiledIn()) GTEST_SKIP() << "built without NCCL";
  if (CudaDeviceCount() == 0 || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto comm = MakeNcclCommunicator(0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<torch::Tensor> tensors = {torch::arange(10, torch::kFloat32).to(torch::kCUDA),
                                        torch::ones({3, 3}, torch::kFloat32).to(torch::kCUDA)};
  ASSERT_TRUE((*comm)->AllReduceSum(tensors).ok());
  EXPECT_TRUE(torch::equal(tensors[0].cpu(), torch::arange(10, torch::kFloat32)));
  EXPECT_EQ(tensors[1].sum().item<float>(), 9.0f);
}

TEST(Nccl, ReportsWhyItCannotStartWithoutADevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto comm = MakeNcclCommunicator(0);
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(absl::IsUnimplemented(comm.status()) || absl::IsFailedPrecondition(comm.status()))
      << comm.status();
}

}  // namespace
}  // namespace xmod
