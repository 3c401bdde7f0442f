#include "worker/model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <string>

namespace xmod {
namespace {

// LibTorch 2.4 names autocast's switches by device type; 1.13 has one pair per
// device (cpu, and the unnamed one for CUDA).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool IsOn(torch::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void SetOn(torch::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
torch::ScalarType Dtype(torch::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void SetDtype(torch::DeviceType t, torch::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool IsOn(torch::DeviceType t) {
  return t == torch::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void SetOn(torch::DeviceType t, bool on) {
  if (t == torch::kCPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
torch::ScalarType Dtype(torch::DeviceType t) {
  return t == torch::kCPU ? at::autocast::get_autocast_cpu_dtype()
                          : at::autocast::get_autocast_gpu_dtype();
}
void SetDtype(torch::DeviceType t, torch::ScalarType d) {
  if (t == torch::kCPU) {
    at::autocast::set_autocast_cpu_dtype(d);
  } else {
    at::autocast::set_autocast_gpu_dtype(d);
  }
}
#endif

}  // namespace

Autocast::Autocast(const torch::Device& device, bool enabled, torch::ScalarType dtype)
    : type_(device.type()) {
  if (!enabled) return;
  active_ = true;
  was_enabled_ = IsOn(type_);
  was_dtype_ = Dtype(type_);
  SetDtype(type_, dtype);
  SetOn(type_, true);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetOn(type_, was_enabled_);
  SetDtype(type_, was_dtype_);
}

AutocastOff::AutocastOff(const torch::Device& device)
    : type_(device.type()), was_enabled_(IsOn(type_)) {
  if (was_enabled_) SetOn(type_, false);
}

AutocastOff::~AutocastOff() {
  if (was_enabled_) SetOn(type_, true);
}

bool AutocastEnabled(const torch::Device& device) { return IsOn(device.type()); }

std::string Bf16Unsupported(const torch::Device& device) {
  try {
    const torch::Tensor a = torch::ones({8, 8}, torch::dtype(torch::kBFloat16).device(device));
    const double sum = torch::matmul(a, a).sum().item<double>();
    if (sum != 512.0) return device.str() + " computes bf16 matmuls wrongly";
    return "";
  } catch (const c10::Error& e) {
    return device.str() + " cannot compute in bf16: " + e.what_without_backtrace();
  }
}

}  // namespace xmod
