// The job file: the contract between the orchestrator and the worker. The
// orchestrator resolves a grid point into one (orchestrator/sweep/expand.h: every
// ResolvedJob holds its JobFile); the coordinator hands its JSON to a worker group with
// each lease; `xmod-train --job FILE` reads the same JSON from disk. Both sides
// use this one type, so a field is named, typed and checked in one place. The
// format is documented in docs/job-file.md.
//
// Torch-free and exception-free: parsing returns INVALID_ARGUMENT naming the
// field, whatever the bytes.
#ifndef XMOD_COMMON_JOB_FILE_H_
#define XMOD_COMMON_JOB_FILE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/accounting.h"

namespace xmod {

// The learning-rate schedule after warm-up.
enum class Schedule { kCosine, kConstant, kWsd };
std::string_view ScheduleName(Schedule schedule);
// Inverse of ScheduleName; INVALID_ARGUMENT naming the known schedules otherwise.
absl::StatusOr<Schedule> ParseSchedule(std::string_view name);

// The shape of a wsd cooldown (docs/schedules.md): the multiplier g(r) that takes
// the learning rate from lr (r = 0) to min_lr (r = 1), lr(r) = min_lr + (lr − min_lr)·g(r):
// linear 1 − r, one_minus_sqrt 1 − √r (Hägele et al. 2024's default), cosine
// (1 + cos πr)/2; exponential is lr·(min_lr/lr)^r (needs min_lr > 0).
enum class DecayShape { kLinear, kOneMinusSqrt, kCosine, kExponential };
std::string_view DecayShapeName(DecayShape shape);
absl::StatusOr<DecayShape> ParseDecayShape(std::string_view name);

// How the expert layers of a moe or deco job train (docs/baselines.md). The
// balancing coefficient α of moe is JobFile::balance_coef; JobFile::gate names the
// gate: "softmax", "pre_softmax", "sigmoid" (moe) or "relu" (deco).
struct ExpertTraining {
  double z_coef = 0.0;              // moe: β of the router z-loss
  double capacity_factor = 0.0;     // moe: C = ceil(N·k/E · cf) per expert; 0 is dropless
  double bias_rate = 0.0;           // moe: aux-loss-free bias step u (0: off)
  double entropy_init = 0.0;        // deco: initial (and floor) entropy coefficient c_init
  double entropy_multiplier = 1.0;  // deco: m, c ← c·m above the target ratio, c/m below
};

struct JobFile {
  std::string id;  // HexId of CanonicalJson(): expanding twice gives the same id
  ModelShape shape;
  int64_t routed_tokens = 0;  // k per sequence (context for dense models)
  // "variance_scaled" (X-MoD), "sigmoid" (MoD), "none" (dense); moe and deco as
  // ExpertTraining says.
  std::string gate;
  double balance_coef = 0.0;
  ExpertTraining expert_training;  // moe and deco; with shape.experts the "experts" object
  // The family's options object as the job file carries it under the family's
  // key (FamilyTraits::options_key), for a family that reads it itself (its
  // worker and sweep code); null for a family without one. moe and deco decode
  // theirs into shape.experts and expert_training, and write it from them.
  nlohmann::json family_options;
  double router_coef = 0.0;
  int64_t tokens = 0;  // D the budget asks for (steps × batch_tokens >= tokens)
  int64_t steps = 0;
  int64_t batch_tokens = 0;
  int64_t batch_size = 0;        // sequences per step, all ranks together
  int64_t micro_batch_size = 0;  // sequences per forward on one rank
  double lr = 0.0;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  Schedule schedule = Schedule::kCosine;
  int64_t decay_steps = 0;                       // wsd only
  DecayShape decay_shape = DecayShape::kLinear;  // wsd only
  // Cooldown branches (docs/schedules.md). A trunk trains the constant-LR part once
  // and keeps a checkpoint at every step in keep_steps (its branches' starts); a
  // branch (parent non-empty) starts from its parent's checkpoint at start_step and
  // trains steps start_step+1 .. steps. Absent from the canonical JSON when unused.
  std::vector<int64_t> keep_steps;
  std::string parent;
  int64_t start_step = 0;
  double weight_decay = 0.0;
  double grad_clip = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  int64_t eval_interval = 0;
  int64_t eval_tokens = 0;  // per interim evaluation: evenly spaced windows
  // Validation tokens of the evaluation at the last step, the one the laws are
  // fitted on: 0 for every window of the validation split, > 0 for evenly spaced
  // windows as eval_tokens; absent means eval_tokens (and keeps the job's id as it
  // was before the field existed).
  std::optional<int64_t> final_eval_tokens;
  // A job of the sweep's lr scan (train.lr_scan): its lr is the sweep's times this
  // factor. Absent outside a scan (and for the scan's factor 1), which keeps those
  // jobs' ids; the worker trains at `lr` and reads nothing else from it.
  std::optional<double> lr_factor;
  int64_t checkpoint_interval = 0;
  int64_t log_interval = 1;
  uint64_t seed = 0;
  std::string precision = "fp32";
  // Memory settings (docs/memory.md); absent from the canonical JSON at their
  // defaults, so the ids of jobs that do not use them are what they were.
  bool recompute = false;                   // per-layer activation recomputation
  std::string optimizer_sharding = "none";  // "none" or "zero1" (AdamW moments split over ranks)
  double flops_per_token = 0.0;             // training FLOPs per token, for the FLOPs column
  // Data: a dataset folder, or the synthetic source when data_path is empty.
  std::string data_path;
  // The dataset's content fingerprint from its meta.json (docs/data.md), read at
  // expand time: part of the id, so re-tokenised data in the same folder gives
  // new jobs. Empty (and absent from the canonical JSON) for synthetic data and
  // datasets from before fingerprints.
  std::string data_fingerprint;
  uint64_t synthetic_seed = 0;
  int64_t data_vocab_size = 0;  // the dataset's vocabulary as the sweep declared it

  int64_t tokens_per_step() const { return batch_size * shape.context; }
  bool is_branch() const { return !parent.empty(); }
  bool is_trunk() const { return !keep_steps.empty(); }
};

// Every field that decides the training result, with sorted keys: what the id is
// a hash of. Leaves out id and flops_per_token (derived from the shape). Every
// -0.0 is written as 0.0: the two are one value and give one id.
nlohmann::json CanonicalJson(const JobFile& job);
// CanonicalJson plus id and flops_per_token: the job file a worker reads.
nlohmann::json ToJson(const JobFile& job);

// INVALID_ARGUMENT ("job: field 'x': ...") for a missing, mistyped or impossible
// field. Never throws. Keys it does not know (the orchestrator's sizes and axes,
// `xmod expand --format json`) are ignored.
absl::StatusOr<JobFile> JobFileFromJson(const nlohmann::json& json);
// The same from text (`source` names it in errors), which may also be a one-element
// array as `xmod expand --format json` prints it.
absl::StatusOr<JobFile> ParseJobFile(std::string_view text, std::string_view source);
// NOT_FOUND when the file cannot be read; otherwise as ParseJobFile.
absl::StatusOr<JobFile> LoadJobFile(const std::string& path);

}  // namespace xmod

#endif  // XMOD_COMMON_JOB_FILE_H_
