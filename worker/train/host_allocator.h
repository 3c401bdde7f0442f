// glibc's malloc settings for a training process.
//
// With glibc's defaults a LibTorch CPU training step gives its activation
// buffers back to the kernel when they are freed (the heap top is trimmed above
// 128 KiB, and large blocks are mmap'd and unmapped), and takes them again, zero
// pages faulted in one by one, on the next step. On the demo's models that is
// half of the step's time spent in the kernel (measured: `worker_bench` part 4).
// Training reuses the same buffer sizes every step, so keeping freed memory in
// the process is the right trade: the resident set stays at the step's peak.
#ifndef XMOD_WORKER_TRAIN_HOST_ALLOCATOR_H_
#define XMOD_WORKER_TRAIN_HOST_ALLOCATOR_H_

#include <cstddef>

namespace xmod {

struct HostAllocatorSettings {
  size_t trim_threshold = 0;  // free memory at the heap top kept before trimming
  size_t mmap_threshold = 0;  // blocks at least this large are mmap'd on their own
  size_t top_pad = 0;         // extra bytes asked of the kernel when the heap grows
};

// What xmod-train and xmod-worker use: nothing trimmed below 1 GiB, blocks up to
// 32 MiB (glibc's largest mmap threshold on 64-bit) served from the heap, 64 MiB
// of padding per growth.
HostAllocatorSettings TrainingAllocatorSettings();

// glibc's starting values (128 KiB each), for side-by-side measurement.
HostAllocatorSettings GlibcStartingSettings();

// Applies the settings to this process's malloc; false where glibc refused one.
bool ApplyHostAllocatorSettings(const HostAllocatorSettings& settings);

// Applies TrainingAllocatorSettings() once per process; later calls do nothing.
// Train() calls it. XMOD_MALLOC=glibc in the environment keeps glibc's behaviour.
void TuneHostAllocatorForTraining();

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_HOST_ALLOCATOR_H_
