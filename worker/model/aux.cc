#include "worker/model/aux.h"

namespace xmod {

void AuxRecord::Add(std::string_view name, torch::Tensor value) {
  for (auto& [key, values] : entries_) {
    if (key == name) {
      values.push_back(std::move(value));
      return;
    }
  }
  entries_.emplace_back(std::string(name), std::vector<torch::Tensor>{std::move(value)});
}

const std::vector<torch::Tensor>& AuxRecord::Get(std::string_view name) const {
  static const std::vector<torch::Tensor> kNone;
  for (const auto& entry : entries_) {
    if (entry.first == name) return entry.second;
  }
  return kNone;
}

void StepTally::Add(const AuxValue& v, double share) {
  const torch::TensorOptions f64 = torch::dtype(torch::kFloat64).device(device_);
  const int index = Index(v.name);
  if (index < 0) sums_.emplace_back(v.name, torch::zeros(v.value.sizes(), f64));
  torch::Tensor& sum = index < 0 ? sums_.back().second : sums_[size_t(index)].second;
  // Element by element what summing the values stacked in one tensor computes,
  // so a sum does not depend on which other values a model names.
  if (v.kind == AuxKind::kCount) {
    sum += v.value.detach().to(f64);
  } else {
    sum += v.value.detach().to(f64) * share;
  }
}

std::vector<torch::Tensor> StepTally::tensors() const {
  std::vector<torch::Tensor> out;
  for (const auto& entry : sums_) out.push_back(entry.second);
  return out;
}

int StepTally::Index(std::string_view name) const {
  for (size_t i = 0; i < sums_.size(); ++i) {
    if (sums_[i].first == name) return static_cast<int>(i);
  }
  return -1;
}

double StepTally::Scalar(std::string_view name) const {
  const int index = Index(name);
  return index < 0 ? 0.0 : sums_[size_t(index)].second.item<double>();
}

torch::Tensor StepTally::Get(std::string_view name) const {
  const int index = Index(name);
  return index < 0 ? torch::Tensor() : sums_[size_t(index)].second;
}

}  // namespace xmod
