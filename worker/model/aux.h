// Named auxiliary values, from the layers to the report. During a forward pass
// the layers record what they measured under names of their own (AuxRecord);
// at its end each of the model's auxiliary objectives turns those records into
// named values (AuxValue: losses with their weights, means, counts); a training
// step sums the values of its micro-batches and ranks by name (StepTally); after
// the optimizer step each objective reads the sums, adjusts what it steers and
// names what the step reports (AuxObjective::AfterStep). The trainer handles
// names only: a new objective needs no change there.
#ifndef XMOD_WORKER_MODEL_AUX_H_
#define XMOD_WORKER_MODEL_AUX_H_

#include <torch/torch.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xmod {

// What the layers of one forward pass recorded, by name, in layer order (one
// entry per layer that recorded the name). Not thread-safe; one per pass.
class AuxRecord {
 public:
  // `loss_options`: those of the residual stream (fp32), which Zero() takes.
  explicit AuxRecord(torch::TensorOptions loss_options) : loss_options_(loss_options) {}
  void Add(std::string_view name, torch::Tensor value);
  // The values recorded under `name`; empty when no layer recorded it.
  const std::vector<torch::Tensor>& Get(std::string_view name) const;
  // A zero scalar: where a sum of recorded losses starts.
  torch::Tensor Zero() const { return torch::zeros({}, loss_options_); }

 private:
  torch::TensorOptions loss_options_;
  std::vector<std::pair<std::string, std::vector<torch::Tensor>>> entries_;
};

enum class AuxKind {
  kLoss,   // a scalar loss: weight · value joins the training loss; summed like kMean
  kMean,   // a scalar mean over the micro-batch's tokens: summed weighted by its share
  kCount,  // counts of any shape: summed as they are
};

struct AuxValue {
  std::string name;
  torch::Tensor value;  // kLoss keeps its gradient; the others are detached
  AuxKind kind = AuxKind::kMean;
  double weight = 0.0;  // kLoss: the loss's coefficient
};

struct NamedValue {
  std::string name;
  double value = 0.0;
};

// The named values of one optimizer step: each micro-batch's AuxValues summed by
// name (losses and means times the micro-batch's share of the global batch,
// counts as they are), then over the ranks by all-reducing tensors() in place.
// Float64 on the model's device. Every rank must add the same names in the same
// order (it does: the ranks run the same model). Not thread-safe.
class StepTally {
 public:
  explicit StepTally(torch::Device device) : device_(device) {}
  void Add(const AuxValue& value, double share);
  void Add(const std::vector<AuxValue>& values, double share) {
    for (const AuxValue& v : values) Add(v, share);
  }
  // The sums in the order their names were first added; they share storage with
  // the tally, so reducing them in place reduces the tally.
  std::vector<torch::Tensor> tensors() const;
  bool Has(std::string_view name) const { return Index(name) >= 0; }
  // The sum of a scalar value (0 when absent), read on the host.
  double Scalar(std::string_view name) const;
  // The sum of `name`; undefined when absent.
  torch::Tensor Get(std::string_view name) const;

 private:
  int Index(std::string_view name) const;  // -1 when absent
  torch::Device device_;
  std::vector<std::pair<std::string, torch::Tensor>> sums_;
};

// One kind of auxiliary objective of a model (depth routing, top-k experts,
// DECO's experts): it reads what its layers recorded and acts once per step. A
// family lists its objectives in its table row (family/family.h).
class AuxObjective {
 public:
  virtual ~AuxObjective() = default;
  // The end of a forward pass, in fp32 with autocast off: appends this
  // objective's named values, read from `record`.
  virtual void Collect(const AuxRecord& record, std::vector<AuxValue>* values) const = 0;
  // After each optimizer step, with the step's sums over every micro-batch and
  // rank (the same on every rank, so the ranks stay identical): adjusts the state
  // it steers and appends, in order, the values the step reports.
  virtual void AfterStep(const StepTally& tally, std::vector<NamedValue>* report) = 0;
};

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_AUX_H_
