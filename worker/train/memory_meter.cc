#include "worker/train/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace xmod {

namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

// The wrapped allocation of each live pointer: its size and the inner deleter.
// LibTorch requires a CPU DataPtr's context to be its data pointer (some paths
// assert it), so the bookkeeping lives here rather than in a context object.
struct Allocation {
  int64_t bytes;
  c10::DeleterFnPtr deleter;
  void* context;
};
std::mutex g_mutex;
std::unordered_map<void*, Allocation>& Live() {
  static auto* live = new std::unordered_map<void*, Allocation>();
  return *live;
}

void Release(void* data) {
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = Live().find(data);
    if (it == Live().end()) return;  // not ours: cannot happen
    a = it->second;
    Live().erase(it);
  }
  g_current.fetch_sub(a.bytes, std::memory_order_relaxed);
  if (a.deleter != nullptr) a.deleter(a.context);
}

// LibTorch 2.x made Allocator::allocate non-const.
#if TORCH_VERSION_MAJOR >= 2
#define XMOD_ALLOCATE_CONST
#else
#define XMOD_ALLOCATE_CONST const
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t bytes) XMOD_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    const c10::DeleterFnPtr deleter = inner.get_deleter();
    void* context = inner.release_context();
    if (data == nullptr) return {nullptr, nullptr, deleter, c10::Device(c10::DeviceType::CPU)};
    const auto n = static_cast<int64_t>(bytes);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      Live()[data] = Allocation{n, deleter, context};
    }
    const int64_t now = g_current.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, data, &Release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

  // Pure virtual in LibTorch 2.x's Allocator; absent from 1.13's (no override).
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void CpuMemoryMeter::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator counting(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&counting, /*priority=*/100);
    g_installed = true;
  });
}

bool CpuMemoryMeter::Installed() { return g_installed; }

int64_t CpuMemoryMeter::Current() { return g_current.load(std::memory_order_relaxed); }

int64_t CpuMemoryMeter::Peak() { return g_peak.load(std::memory_order_relaxed); }

void CpuMemoryMeter::ResetPeak() { g_peak.store(Current(), std::memory_order_relaxed); }

}  // namespace xmod
