// DECO (docs/baselines.md): each expert layer's MLP is a d→E router, non-gated
// experts computed densely in training (up d→E·d_e, down E·d_e→d, a scale λ per
// expert, NormSiLU's γ over d_e) and a SwiGLU shared expert of width d_s; a
// controller steers the activated fraction to its target ratio.
#include "absl/strings/str_format.h"
#include "common/accounting.h"
#include "common/families/families.h"
#include "common/job_file.h"

namespace xmod {

namespace {

long double Params(const ModelShape& s) {
  const long double d = static_cast<long double>(s.d_model);
  const ExpertShape& e = s.experts;
  const long double experts = static_cast<long double>(e.experts);
  const long double width = static_cast<long double>(e.width);
  return d * experts + 2 * d * experts * width + experts + width +
         3 * d * static_cast<long double>(e.shared_width);
}

double Flops(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const ExpertShape& e = s.experts;
  const double experts = static_cast<double>(e.experts);
  return 2.0 * d * experts + 4.0 * d * experts * static_cast<double>(e.width) +
         6.0 * d * static_cast<double>(e.shared_width);
}

double ActiveMlpParams(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const ExpertShape& e = s.experts;
  const double experts = static_cast<double>(e.experts);
  return d * experts + e.target_ratio * 2.0 * d * experts * static_cast<double>(e.width) +
         3.0 * d * static_cast<double>(e.shared_width);
}

// At inference only the active fraction of the routed experts is computed.
double InferenceSaving(const ModelShape& s, int64_t expert_layers) {
  const double d = static_cast<double>(s.d_model);
  const double routed = 4.0 * d * static_cast<double>(s.experts.experts * s.experts.width);
  return static_cast<double>(expert_layers) * (1.0 - s.experts.target_ratio) * routed;
}

double ExpertSparsity(const ModelShape& s) { return 1.0 - s.experts.target_ratio; }

// Training computes every expert: N_active is N_total.
int64_t Active(const ModelShape& s, int64_t /*dense_layers*/) {
  return CountParams(s).non_embedding;
}

// A target ratio in (0, 1), no fixed top-k, a multiplier of at least 1, and the ReLU gate.
absl::Status CheckJob(const JobFile& job) {
  const ExpertShape& e = job.shape.experts;
  if (e.target_ratio <= 0 || e.target_ratio >= 1) {
    return absl::InvalidArgumentError("job: field 'experts.target_ratio' must be in (0, 1)");
  }
  if (e.top_k != 0) {
    return absl::InvalidArgumentError(
        "job: field 'experts.top_k' must be 0 for family deco (its experts per token are "
        "data-dependent)");
  }
  if (job.expert_training.entropy_multiplier < 1) {
    return absl::InvalidArgumentError("job: field 'experts.entropy_multiplier' must be at least 1");
  }
  if (job.gate != "relu") {
    return absl::InvalidArgumentError("job: field 'gate' must be relu for family deco");
  }
  return absl::OkStatus();
}

}  // namespace

FamilyTraits DecoFamily() {
  FamilyTraits t;
  t.id = Family::kDeco;
  t.name = "deco";
  t.recomputes = false;
  t.routing = RoutingKind::kExperts;
  t.expert_mlp_params = &Params;
  t.expert_mlp_flops = &Flops;
  t.expert_mlp_active_params = &ActiveMlpParams;
  t.expert_inference_saving = &InferenceSaving;
  t.expert_sparsity = &ExpertSparsity;
  t.active_params = &Active;
  t.check_job = &CheckJob;
  t.label = [](const RunFields& r) { return absl::StrFormat("DECO E=%d", r.experts); };
  t.series = [](const RunFields&) { return std::string("DECO baseline (at 1 - target ratio)"); };
  t.plot_rank = 4;
  t.options_key = "experts";
  t.read_options = &ReadExpertOptions;
  t.write_options = &WriteExpertOptions;
  return t;
}

}  // namespace xmod
