#include "worker/train/job.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace xmod {

namespace {

template <typename T>
absl::Status Get(const nlohmann::json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end())
    return absl::InvalidArgumentError(absl::StrCat("job: missing field '", key, "'"));
  try {
    *out = it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job: field '", key, "': ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

#define XMOD_GET(key, out)                 \
  do {                                     \
    absl::Status s_ = Get(json, key, out); \
    if (!s_.ok()) return s_;               \
  } while (0)

absl::StatusOr<TrainJob> ParseTrainJob(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("job: expected a JSON object");
  TrainJob job;
  std::string family, schedule;
  XMOD_GET("id", &job.id);
  XMOD_GET("family", &family);
  auto parsed = ParseFamily(family);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job: field 'family': ", parsed.status().message()));
  }
  job.shape.family = *parsed;
  XMOD_GET("d_model", &job.shape.d_model);
  XMOD_GET("n_heads", &job.shape.n_heads);
  XMOD_GET("n_layers", &job.shape.n_layers);
  XMOD_GET("d_ff", &job.shape.d_ff);
  XMOD_GET("vocab_size", &job.shape.vocab_size);
  XMOD_GET("context", &job.shape.context);
  XMOD_GET("stride", &job.shape.stride);
  XMOD_GET("capacity", &job.shape.capacity);
  XMOD_GET("routed_tokens", &job.routed_tokens);
  XMOD_GET("balance_coef", &job.balance_coef);
  XMOD_GET("router_coef", &job.router_coef);
  XMOD_GET("steps", &job.steps);
  XMOD_GET("batch_size", &job.batch_size);
  XMOD_GET("micro_batch_size", &job.micro_batch_size);
  XMOD_GET("lr", &job.lr);
  XMOD_GET("min_lr", &job.min_lr);
  XMOD_GET("warmup_steps", &job.warmup_steps);
  XMOD_GET("schedule", &schedule);
  XMOD_GET("decay_steps", &job.decay_steps);
  XMOD_GET("weight_decay", &job.weight_decay);
  XMOD_GET("grad_clip", &job.grad_clip);
  XMOD_GET("beta1", &job.beta1);
  XMOD_GET("beta2", &job.beta2);
  XMOD_GET("eval_interval", &job.eval_interval);
  XMOD_GET("eval_tokens", &job.eval_tokens);
  if (json.contains("final_eval_tokens") && !json["final_eval_tokens"].is_null()) {
    if (!json["final_eval_tokens"].is_number_integer()) {
      return absl::InvalidArgumentError("job: field 'final_eval_tokens' must be an integer");
    }
    int64_t final_tokens = 0;
    XMOD_GET("final_eval_tokens", &final_tokens);
    if (final_tokens < 0) {
      return absl::InvalidArgumentError(
          "job: field 'final_eval_tokens' must be 0 (the whole validation split) or positive");
    }
    job.final_eval_tokens = final_tokens;
  }
  XMOD_GET("checkpoint_interval", &job.checkpoint_interval);
  XMOD_GET("log_interval", &job.log_interval);
  XMOD_GET("seed", &job.seed);
  XMOD_GET("precision", &job.precision);
  XMOD_GET("flops_per_token", &job.flops_per_token);
  if (schedule == "cosine") {
    job.schedule = LrSchedule::kCosine;
  } else if (schedule == "constant") {
    job.schedule = LrSchedule::kConstant;
  } else if (schedule == "wsd") {
    job.schedule = LrSchedule::kWsd;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("job: field 'schedule': unknown '", schedule, "'"));
  }
  auto data = json.find("data");
  if (data == json.end() || !data->is_object()) {
    return absl::InvalidArgumentError("job: missing object 'data'");
  }
  if (data->value("synthetic", false)) {
    job.synthetic_seed = data->value("seed", uint64_t{0});
  } else {
    job.data_path = data->value("path", std::string());
    if (job.data_path.empty()) return absl::InvalidArgumentError("job: field 'data.path' is empty");
  }
  const auto positive = [](int64_t v) { return v > 0; };
  for (auto [name, value] :
       {std::pair{"d_model", job.shape.d_model}, std::pair{"n_heads", job.shape.n_heads},
        std::pair{"n_layers", job.shape.n_layers}, std::pair{"context", job.shape.context},
        std::pair{"steps", job.steps}, std::pair{"batch_size", job.batch_size},
        std::pair{"micro_batch_size", job.micro_batch_size},
        std::pair{"eval_interval", job.eval_interval},
        std::pair{"checkpoint_interval", job.checkpoint_interval},
        std::pair{"log_interval", job.log_interval}}) {
    if (!positive(value)) {
      return absl::InvalidArgumentError(absl::StrCat("job: field '", name, "' must be positive"));
    }
  }
  if (job.shape.d_model % job.shape.n_heads != 0) {
    return absl::InvalidArgumentError("job: d_model is not divisible by n_heads");
  }
  return job;
}

#undef XMOD_GET

absl::StatusOr<TrainJob> LoadTrainJob(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the job file"));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  // `xmod expand --format json` prints an array; accept a one-element array too.
  if (json.is_array()) {
    if (json.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": holds ", json.size(), " jobs; give exactly one"));
    }
    json = json[0];
  }
  auto job = ParseTrainJob(json);
  if (!job.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", job.status().message()));
  return job;
}

double LearningRate(const TrainJob& job, int64_t step) {
  if (job.warmup_steps > 0 && step <= job.warmup_steps) {
    return job.lr * static_cast<double>(step) / static_cast<double>(job.warmup_steps);
  }
  switch (job.schedule) {
    case LrSchedule::kConstant:
      return job.lr;
    case LrSchedule::kCosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, job.steps - job.warmup_steps));
      const double progress = std::min(1.0, static_cast<double>(step - job.warmup_steps) / span);
      return job.min_lr + 0.5 * (job.lr - job.min_lr) * (1.0 + std::cos(M_PI * progress));
    }
    case LrSchedule::kWsd: {
      const int64_t decay_start = job.steps - job.decay_steps;
      if (step <= decay_start || job.decay_steps <= 0) return job.lr;
      const double progress =
          static_cast<double>(step - decay_start) / static_cast<double>(job.decay_steps);
      return job.lr + (job.min_lr - job.lr) * std::min(1.0, progress);
    }
  }
  return job.lr;
}

}  // namespace xmod
