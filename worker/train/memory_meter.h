// Exact byte counts of LibTorch's CPU tensor memory, for checking the memory
// model (common/memory.h) against what a training step really holds.
//
// Install() puts a counting allocator in front of LibTorch's CPU allocator
// (c10::SetCPUAllocator with a higher priority): every CPU tensor's storage
// allocated afterwards is counted while it lives. It counts storage bytes as
// requested, not what malloc rounds them up to, and nothing outside tensors
// (LibTorch's own bookkeeping, the autograd graph's nodes, thread stacks): the
// quantity a GPU's caching allocator would be asked for. Storage allocated
// before Install() is not counted when it is freed either.
#ifndef XMOD_WORKER_TRAIN_MEMORY_METER_H_
#define XMOD_WORKER_TRAIN_MEMORY_METER_H_

#include <cstdint>

namespace xmod {

class CpuMemoryMeter {
 public:
  // Idempotent; thread-safe. Never uninstalled (tensors may outlive any scope).
  static void Install();
  static bool Installed();
  // Bytes of counted CPU tensor storage alive now.
  static int64_t Current();
  // The largest Current() since the last ResetPeak() (or Install()).
  static int64_t Peak();
  // Sets Peak() to Current().
  static void ResetPeak();
};

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_MEMORY_METER_H_
