#include "worker/train/host_allocator.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace xmod {
namespace {

TEST(HostAllocator, GlibcAcceptsBothSettings) {
  EXPECT_TRUE(ApplyHostAllocatorSettings(GlibcStartingSettings()));
  EXPECT_TRUE(ApplyHostAllocatorSettings(TrainingAllocatorSettings()));
}

// The point of the training settings: a step's freed buffers stay in the process
// (no munmap/trim and page faults on the next step). Under glibc's starting
// values a 16 MiB block is mmap'd on its own and handed back when freed.
TEST(HostAllocator, FreedStepBuffersStayInTheProcess) {
  constexpr size_t kBlock = size_t{16} << 20;
  ASSERT_TRUE(ApplyHostAllocatorSettings(GlibcStartingSettings()));
  {
    void* p = std::malloc(kBlock);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kBlock);
    const size_t mapped = mallinfo2().hblkhd;
    std::free(p);
    EXPECT_GE(mapped - mallinfo2().hblkhd, kBlock) << "glibc's defaults should unmap it";
  }
  ASSERT_TRUE(ApplyHostAllocatorSettings(TrainingAllocatorSettings()));
  {
    void* p = std::malloc(kBlock);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kBlock);
    const size_t mapped = mallinfo2().hblkhd;
    std::free(p);
    EXPECT_EQ(mallinfo2().hblkhd, mapped) << "not served by its own mapping";
    EXPECT_GE(mallinfo2().fordblks, kBlock) << "freed memory should stay in the heap";
  }
}

}  // namespace
}  // namespace xmod
