#include "common/job_file.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/status_macros.h"

namespace xmod {

std::string_view ScheduleName(Schedule schedule) {
  switch (schedule) {
    case Schedule::kCosine:
      return "cosine";
    case Schedule::kConstant:
      return "constant";
    case Schedule::kWsd:
      return "wsd";
  }
  return "unknown";
}

absl::StatusOr<Schedule> ParseSchedule(std::string_view name) {
  for (Schedule s : {Schedule::kCosine, Schedule::kConstant, Schedule::kWsd}) {
    if (name == ScheduleName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule '", std::string(name), "' (known: cosine, constant, wsd)"));
}

std::string_view DecayShapeName(DecayShape shape) {
  switch (shape) {
    case DecayShape::kLinear:
      return "linear";
    case DecayShape::kOneMinusSqrt:
      return "one_minus_sqrt";
    case DecayShape::kCosine:
      return "cosine";
    case DecayShape::kExponential:
      return "exponential";
  }
  return "?";
}

absl::StatusOr<DecayShape> ParseDecayShape(std::string_view name) {
  for (DecayShape s : {DecayShape::kLinear, DecayShape::kOneMinusSqrt, DecayShape::kCosine,
                       DecayShape::kExponential}) {
    if (name == DecayShapeName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown decay shape '", std::string(name),
                   "' (known: one_minus_sqrt, linear, cosine, exponential)"));
}

namespace {

// -0.0 and 0.0 are one number: every -0.0 in `j` (at any depth) becomes 0.0, so
// that a job's id does not depend on which was written. Nothing else changes, so
// no id of a job without a -0.0 changes.
void NormaliseNegativeZeros(nlohmann::json* j) {
  if (j->is_number_float()) {
    if (j->get<double>() == 0.0) *j = 0.0;
  } else if (j->is_structured()) {
    for (nlohmann::json& element : *j) NormaliseNegativeZeros(&element);
  }
}

}  // namespace

nlohmann::json CanonicalJson(const JobFile& job) {
  nlohmann::json data = job.data_path.empty() ? nlohmann::json{{"synthetic", true},
                                                               {"seed", job.synthetic_seed},
                                                               {"vocab_size", job.data_vocab_size}}
                                              : nlohmann::json{{"path", job.data_path},
                                                               {"vocab_size", job.data_vocab_size}};
  if (!job.data_path.empty() && !job.data_fingerprint.empty()) {
    data["fingerprint"] = job.data_fingerprint;
  }
  nlohmann::json j{
      {"family", FamilyName(job.shape.family)},
      {"d_model", job.shape.d_model},
      {"n_heads", job.shape.n_heads},
      {"n_layers", job.shape.n_layers},
      {"d_ff", job.shape.d_ff},
      {"vocab_size", job.shape.vocab_size},
      {"context", job.shape.context},
      {"stride", job.shape.stride},
      {"capacity", job.shape.capacity},
      {"routed_tokens", job.routed_tokens},
      {"gate", job.gate},
      {"balance_coef", job.balance_coef},
      {"router_coef", job.router_coef},
      {"tokens", job.tokens},
      {"steps", job.steps},
      {"batch_tokens", job.batch_tokens},
      {"batch_size", job.batch_size},
      {"micro_batch_size", job.micro_batch_size},
      {"lr", job.lr},
      {"min_lr", job.min_lr},
      {"warmup_steps", job.warmup_steps},
      {"schedule", ScheduleName(job.schedule)},
      {"decay_steps", job.decay_steps},
      {"weight_decay", job.weight_decay},
      {"grad_clip", job.grad_clip},
      {"beta1", job.beta1},
      {"beta2", job.beta2},
      {"eval_interval", job.eval_interval},
      {"eval_tokens", job.eval_tokens},
      {"checkpoint_interval", job.checkpoint_interval},
      {"log_interval", job.log_interval},
      {"seed", job.seed},
      {"precision", job.precision},
      {"data", data},
  };
  if (job.final_eval_tokens.has_value()) j["final_eval_tokens"] = *job.final_eval_tokens;
  if (job.lr_factor.has_value()) j["lr_factor"] = *job.lr_factor;
  if (job.recompute) j["recompute"] = true;
  // Linear was the only wsd shape before the field existed: its jobs keep their ids.
  if (job.schedule == Schedule::kWsd && job.decay_shape != DecayShape::kLinear) {
    j["decay_shape"] = DecayShapeName(job.decay_shape);
  }
  if (!job.keep_steps.empty()) j["keep_steps"] = job.keep_steps;
  if (!job.parent.empty()) {
    j["parent"] = job.parent;
    j["start_step"] = job.start_step;
  }
  if (job.optimizer_sharding != "none") j["optimizer_sharding"] = job.optimizer_sharding;
  const FamilyTraits& traits = Traits(job.shape.family);
  if (traits.options_key != nullptr) {
    j[traits.options_key] =
        traits.write_options != nullptr ? traits.write_options(job) : job.family_options;
  }
  NormaliseNegativeZeros(&j);
  return j;
}

nlohmann::json ToJson(const JobFile& job) {
  nlohmann::json j = CanonicalJson(job);
  j["id"] = job.id;
  j["flops_per_token"] = job.flops_per_token;
  return j;
}

namespace {

absl::Status ReadData(const nlohmann::json& json, JobFile* job) {
  auto it = json.find("data");
  if (it == json.end() || !it->is_object()) {
    return absl::InvalidArgumentError("job: field 'data' must be an object");
  }
  JsonReader data(*it, "data.");
  bool synthetic = false;
  data.Bool("synthetic", &synthetic);
  data.Int("vocab_size", &job->data_vocab_size, /*required=*/false);
  if (synthetic) {
    job->synthetic_seed = 0;
    if (data.Has("seed")) data.Unsigned("seed", &job->synthetic_seed);
  } else {
    data.String("path", &job->data_path);
    if (data.status().ok() && job->data_path.empty()) data.Fail("path", "is empty");
    if (data.Has("fingerprint")) data.String("fingerprint", &job->data_fingerprint);
  }
  return data.status();
}

// The family's options object (FamilyTraits::options_key), read by the family's
// hook, then the family's own checks of the whole job.
absl::Status ReadFamilyOptions(const nlohmann::json& json, JobFile* job) {
  const FamilyTraits& traits = Traits(job->shape.family);
  if (traits.options_key != nullptr) {
    auto it = json.find(traits.options_key);
    if (it == json.end() || !it->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("job: field '", traits.options_key,
                                                     "' must be an object for family ",
                                                     std::string(traits.name)));
    }
    job->family_options = *it;
    if (traits.read_options != nullptr) RETURN_IF_ERROR(traits.read_options(*it, job));
  }
  if (traits.check_job != nullptr) RETURN_IF_ERROR(traits.check_job(*job));
  return absl::OkStatus();
}

absl::Status ReadKeepSteps(const nlohmann::json& json, JobFile* job) {
  auto it = json.find("keep_steps");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return absl::InvalidArgumentError("job: field 'keep_steps' must be an array of steps");
  }
  for (const nlohmann::json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1) {
      return absl::InvalidArgumentError("job: field 'keep_steps' must hold positive integer steps");
    }
    job->keep_steps.push_back(v.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status CheckRanges(const JobFile& job) {
  const std::pair<const char*, int64_t> positive[] = {
      {"d_model", job.shape.d_model},       {"n_heads", job.shape.n_heads},
      {"n_layers", job.shape.n_layers},     {"d_ff", job.shape.d_ff},
      {"vocab_size", job.shape.vocab_size}, {"context", job.shape.context},
      {"stride", job.shape.stride},         {"steps", job.steps},
      {"batch_size", job.batch_size},       {"micro_batch_size", job.micro_batch_size},
      {"eval_interval", job.eval_interval}, {"checkpoint_interval", job.checkpoint_interval},
      {"log_interval", job.log_interval},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("job: field '", name, "' must be positive"));
    }
  }
  const std::pair<const char*, int64_t> non_negative[] = {
      {"warmup_steps", job.warmup_steps},
      {"decay_steps", job.decay_steps},
      {"eval_tokens", job.eval_tokens},
      {"routed_tokens", job.routed_tokens},
  };
  for (const auto& [name, value] : non_negative) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job: field '", name, "' must not be negative"));
    }
  }
  if (job.final_eval_tokens.has_value() && *job.final_eval_tokens < 0) {
    return absl::InvalidArgumentError(
        "job: field 'final_eval_tokens' must be 0 (the whole validation split) or positive");
  }
  if (job.lr_factor.has_value() && !(*job.lr_factor > 0.0 && std::isfinite(*job.lr_factor))) {
    return absl::InvalidArgumentError("job: field 'lr_factor' must be a positive number");
  }
  for (int64_t s : job.keep_steps) {
    if (s > job.steps) {
      return absl::InvalidArgumentError(absl::StrCat("job: field 'keep_steps' holds step ", s,
                                                     ", past the last step ", job.steps));
    }
  }
  if (!job.parent.empty() && (job.start_step < 1 || job.start_step >= job.steps)) {
    return absl::InvalidArgumentError(
        "job: field 'start_step' must be between 1 and steps - 1 for a branch");
  }
  if (job.schedule == Schedule::kWsd && job.decay_shape == DecayShape::kExponential &&
      !(job.min_lr > 0)) {
    return absl::InvalidArgumentError(
        "job: field 'decay_shape' exponential needs min_lr > 0 (it decays to min_lr/lr)");
  }
  if (job.shape.d_model % job.shape.n_heads != 0) {
    return absl::InvalidArgumentError("job: d_model is not divisible by n_heads");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobFile> JobFileFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return absl::InvalidArgumentError("job: expected a JSON object");
  JobFile job;
  JsonReader r(json, "");
  std::string family, schedule;
  r.String("id", &job.id);
  r.String("family", &family);
  if (r.status().ok()) {
    auto parsed = ParseFamily(family);
    if (!parsed.ok()) r.Fail("family", std::string(parsed.status().message()));
    if (parsed.ok()) job.shape.family = *parsed;
  }
  r.Int("d_model", &job.shape.d_model);
  r.Int("n_heads", &job.shape.n_heads);
  r.Int("n_layers", &job.shape.n_layers);
  r.Int("d_ff", &job.shape.d_ff);
  r.Int("vocab_size", &job.shape.vocab_size);
  r.Int("context", &job.shape.context);
  r.Int("stride", &job.shape.stride);
  r.Real("capacity", &job.shape.capacity);
  r.Int("routed_tokens", &job.routed_tokens);
  r.String("gate", &job.gate, /*required=*/false);
  r.Real("balance_coef", &job.balance_coef);
  r.Real("router_coef", &job.router_coef);
  r.Int("tokens", &job.tokens, /*required=*/false);
  r.Int("steps", &job.steps);
  r.Int("batch_tokens", &job.batch_tokens, /*required=*/false);
  r.Int("batch_size", &job.batch_size);
  r.Int("micro_batch_size", &job.micro_batch_size);
  r.Real("lr", &job.lr);
  r.Real("min_lr", &job.min_lr);
  r.Int("warmup_steps", &job.warmup_steps);
  r.String("schedule", &schedule);
  if (r.status().ok()) {
    auto parsed = ParseSchedule(schedule);
    if (!parsed.ok()) r.Fail("schedule", std::string(parsed.status().message()));
    if (parsed.ok()) job.schedule = *parsed;
  }
  r.Int("decay_steps", &job.decay_steps);
  if (r.Has("decay_shape")) {
    std::string shape;
    r.String("decay_shape", &shape);
    if (r.status().ok()) {
      auto parsed = ParseDecayShape(shape);
      if (!parsed.ok()) r.Fail("decay_shape", std::string(parsed.status().message()));
      if (parsed.ok()) job.decay_shape = *parsed;
    }
  }
  r.String("parent", &job.parent, /*required=*/false);
  if (!job.parent.empty()) r.Int("start_step", &job.start_step);
  r.Real("weight_decay", &job.weight_decay);
  r.Real("grad_clip", &job.grad_clip);
  r.Real("beta1", &job.beta1);
  r.Real("beta2", &job.beta2);
  r.Int("eval_interval", &job.eval_interval);
  r.Int("eval_tokens", &job.eval_tokens);
  if (r.Has("final_eval_tokens")) {
    int64_t final_tokens = 0;
    r.Int("final_eval_tokens", &final_tokens);
    job.final_eval_tokens = final_tokens;
  }
  if (r.Has("lr_factor")) {
    double factor = 0.0;
    r.Real("lr_factor", &factor);
    job.lr_factor = factor;
  }
  r.Int("checkpoint_interval", &job.checkpoint_interval);
  r.Int("log_interval", &job.log_interval);
  r.Unsigned("seed", &job.seed);
  r.String("precision", &job.precision);
  r.Bool("recompute", &job.recompute);
  r.String("optimizer_sharding", &job.optimizer_sharding, /*required=*/false);
  if (r.status().ok() && job.optimizer_sharding != "none" && job.optimizer_sharding != "zero1") {
    r.Fail("optimizer_sharding", "must be 'none' or 'zero1'");
  }
  r.Real("flops_per_token", &job.flops_per_token);
  if (!r.status().ok()) return r.status();
  if (absl::Status s = ReadKeepSteps(json, &job); !s.ok()) return s;
  if (job.id.empty()) return absl::InvalidArgumentError("job: field 'id' is empty");
  if (job.data_vocab_size == 0) job.data_vocab_size = job.shape.vocab_size;
  if (absl::Status s = ReadData(json, &job); !s.ok()) return s;
  if (absl::Status s = CheckRanges(job); !s.ok()) return s;
  if (absl::Status s = ReadFamilyOptions(json, &job); !s.ok()) return s;
  // A job file from anywhere (a hand-written one, a hostile client) is held to the
  // sweep's bound too: parameter counts beyond it would wrap.
  if (absl::Status s = CheckModelSize(job.shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job: ", s.message()));
  }
  return job;
}

absl::StatusOr<JobFile> ParseJobFile(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  nlohmann::json json = nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                              /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  // `xmod expand --format json` prints an array; a one-element array is one job.
  if (json.is_array()) {
    if (json.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": holds ", json.size(), " jobs; give exactly one"));
    }
    nlohmann::json first = json[0];
    json = std::move(first);
  }
  auto job = JobFileFromJson(json);
  if (!job.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", job.status().message()));
  }
  return job;
}

absl::StatusOr<JobFile> LoadJobFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the job file"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseJobFile(text.str(), path);
}

}  // namespace xmod
