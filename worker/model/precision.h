// Mixed precision on the current thread: an autocast region (matmuls and
// attention in bf16 on the given device, weights and optimizer state staying
// fp32 outside it) and fp32 islands inside one (the router, the routing decision
// and the losses). Works with LibTorch 1.13 and 2.x, whose autocast switches
// have different names.
#ifndef XMOD_WORKER_MODEL_PRECISION_H_
#define XMOD_WORKER_MODEL_PRECISION_H_

#include <torch/torch.h>

#include <string>

namespace xmod {

// Autocast to `dtype` on `device`'s type while alive, when `enabled`; restores
// the previous state afterwards and drops autocast's cast cache when the
// outermost region ends (the cache holds bf16 copies of the weights, which go
// stale at the next optimizer step).
class Autocast {
 public:
  Autocast(const torch::Device& device, bool enabled, torch::ScalarType dtype = torch::kBFloat16);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  torch::DeviceType type_;
  bool active_ = false, was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat32;
};

// Autocast off on `device`'s type while alive (what ran in fp32 stays fp32).
class AutocastOff {
 public:
  explicit AutocastOff(const torch::Device& device);
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  torch::DeviceType type_;
  bool was_enabled_;
};

// Whether autocast is on for `device`'s type on this thread.
bool AutocastEnabled(const torch::Device& device);

// Empty when `device` can compute in bf16 (a small matmul runs and is right);
// otherwise why not, naming the device (e.g. a GPU older than compute
// capability 8.0).
std::string Bf16Unsupported(const torch::Device& device);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_PRECISION_H_
