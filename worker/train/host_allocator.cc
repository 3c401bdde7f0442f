#include "worker/train/host_allocator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace xmod {

HostAllocatorSettings TrainingAllocatorSettings() {
  HostAllocatorSettings s;
  s.trim_threshold = size_t{1} << 30;
  s.mmap_threshold = size_t{32} << 20;
  s.top_pad = size_t{64} << 20;
  return s;
}

HostAllocatorSettings GlibcStartingSettings() {
  HostAllocatorSettings s;
  s.trim_threshold = size_t{128} << 10;
  s.mmap_threshold = size_t{128} << 10;
  s.top_pad = size_t{128} << 10;
  return s;
}

bool ApplyHostAllocatorSettings(const HostAllocatorSettings& settings) {
#if defined(__GLIBC__)
  bool ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(settings.trim_threshold)) == 1;
  ok &= mallopt(M_MMAP_THRESHOLD, static_cast<int>(settings.mmap_threshold)) == 1;
  ok &= mallopt(M_TOP_PAD, static_cast<int>(settings.top_pad)) == 1;
  return ok;
#else
  (void)settings;
  return false;
#endif
}

void TuneHostAllocatorForTraining() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* choice = std::getenv("XMOD_MALLOC");
    if (choice != nullptr && std::strcmp(choice, "glibc") == 0) return;
    ApplyHostAllocatorSettings(TrainingAllocatorSettings());
  });
}

}  // namespace xmod
