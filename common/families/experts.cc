// The options object of the expert families (moe, deco): "experts" in the job
// file, one set of keys for both (docs/job-file.md), decoded into the typed
// view their accounting reads (ModelShape::experts, JobFile::expert_training).
#include "absl/strings/str_cat.h"
#include "common/families/families.h"
#include "common/job_file.h"
#include "common/json_reader.h"

namespace xmod {

absl::Status ReadExpertOptions(const nlohmann::json& object, JobFile* job) {
  JsonReader r(object, "experts.");
  ExpertShape& e = job->shape.experts;
  ExpertTraining& t = job->expert_training;
  r.Int("count", &e.experts);
  r.Int("top_k", &e.top_k);
  r.Int("width", &e.width);
  r.Int("shared", &e.shared);
  r.Int("shared_width", &e.shared_width);
  r.Int("dense_layers", &e.dense_layers);
  r.Real("target_ratio", &e.target_ratio);
  r.Real("z_coef", &t.z_coef);
  r.Real("capacity_factor", &t.capacity_factor);
  r.Real("bias_rate", &t.bias_rate);
  r.Real("entropy_init", &t.entropy_init);
  r.Real("entropy_multiplier", &t.entropy_multiplier);
  if (!r.status().ok()) return r.status();
  const auto fail = [](const char* field, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("job: field 'experts.", field, "' ", why));
  };
  if (e.experts < 1) return fail("count", "must be positive");
  if (e.width < 1) return fail("width", "must be positive");
  if (e.shared < 0 || e.shared_width < 0) return fail("shared", "must not be negative");
  if (e.dense_layers < 0 || e.dense_layers > job->shape.n_layers) {
    return fail("dense_layers", "must be between 0 and n_layers");
  }
  if (t.z_coef < 0 || t.capacity_factor < 0 || t.bias_rate < 0 || t.entropy_init < 0) {
    return fail("z_coef", "and the other coefficients must not be negative");
  }
  return absl::OkStatus();
}

nlohmann::json WriteExpertOptions(const JobFile& job) {
  const ExpertShape& e = job.shape.experts;
  const ExpertTraining& t = job.expert_training;
  return nlohmann::json{
      {"count", e.experts},
      {"top_k", e.top_k},
      {"width", e.width},
      {"shared", e.shared},
      {"shared_width", e.shared_width},
      {"dense_layers", e.dense_layers},
      {"target_ratio", e.target_ratio},
      {"z_coef", t.z_coef},
      {"capacity_factor", t.capacity_factor},
      {"bias_rate", t.bias_rate},
      {"entropy_init", t.entropy_init},
      {"entropy_multiplier", t.entropy_multiplier},
  };
}

}  // namespace xmod
