// The job a worker trains: the JSON of one row of `xmod expand --format json`,
// parsed into a plain struct (the worker does not link the orchestrator's sweep
// library; the JSON is the contract).
#ifndef XMOD_WORKER_TRAIN_JOB_H_
#define XMOD_WORKER_TRAIN_JOB_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/accounting.h"

namespace xmod {

enum class LrSchedule { kCosine, kConstant, kWsd };

struct TrainJob {
  std::string id;
  ModelShape shape;
  int64_t routed_tokens = 0;
  double balance_coef = 0.0;
  double router_coef = 0.0;
  int64_t steps = 0;
  int64_t batch_size = 0;        // sequences per step, all ranks together
  int64_t micro_batch_size = 0;  // sequences per forward on one rank
  double lr = 0.0;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kCosine;
  int64_t decay_steps = 0;
  double weight_decay = 0.0;
  double grad_clip = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  int64_t eval_interval = 0;
  int64_t eval_tokens = 0;  // per interim evaluation: evenly spaced windows
  // Validation tokens of the evaluation at the last step, the one the laws are fitted
  // on: 0 for every window of the validation split (ValWindowStartsWhole), > 0 for
  // evenly spaced windows as eval_tokens; absent (old job files) means eval_tokens.
  std::optional<int64_t> final_eval_tokens;
  int64_t checkpoint_interval = 0;
  int64_t log_interval = 1;
  uint64_t seed = 0;
  std::string precision = "fp32";
  double flops_per_token = 0.0;  // training FLOPs per token, for the FLOPs column
  // Data: a dataset folder, or the synthetic source when data_path is empty.
  std::string data_path;
  uint64_t synthetic_seed = 0;

  int64_t tokens_per_step() const { return batch_size * shape.context; }
};

// INVALID_ARGUMENT naming the missing or malformed field.
absl::StatusOr<TrainJob> ParseTrainJob(const nlohmann::json& json);
absl::StatusOr<TrainJob> LoadTrainJob(const std::string& path);

// Learning rate for optimizer update `step` (1-based): linear warm-up to lr, then
// cosine to min_lr, constant, or warmup-stable-decay (linear to min_lr over the
// last decay_steps).
double LearningRate(const TrainJob& job, int64_t step);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_JOB_H_
