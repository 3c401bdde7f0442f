// Top-k MoE (docs/baselines.md): the MLP of each expert layer is a d→E router
// (no bias), E routed and K_s shared SwiGLU experts of width d_e; a token uses k
// routed experts. Its trained routing is causal already, so it has only top-k
// losses.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/accounting.h"
#include "common/families/families.h"
#include "common/job_file.h"

namespace xmod {

namespace {

long double Params(const ModelShape& s) {
  const long double d = static_cast<long double>(s.d_model);
  const ExpertShape& e = s.experts;
  return d * static_cast<long double>(e.experts) +
         3 * d * static_cast<long double>(e.width) *
             (static_cast<long double>(e.experts) + static_cast<long double>(e.shared));
}

double Flops(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const ExpertShape& e = s.experts;
  return 2.0 * d * static_cast<double>(e.experts) +
         6.0 * d * static_cast<double>(e.width * (e.top_k + e.shared));
}

double ActiveMlpParams(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const ExpertShape& e = s.experts;
  return d * static_cast<double>(e.experts) +
         3.0 * d * static_cast<double>(e.width * (e.top_k + e.shared));
}

double ExpertSparsity(const ModelShape& s) {
  return 1.0 - static_cast<double>(s.experts.top_k) / static_cast<double>(s.experts.experts);
}

// The parameters one token uses: everything but the routed experts it skips.
int64_t Active(const ModelShape& s, int64_t /*dense_layers*/) {
  const double unused = static_cast<double>(ExpertLayerCount(s)) *
                        (static_cast<double>(ExpertMlpParams(s)) - ActiveMlpParams(s));
  return std::llround(static_cast<double>(CountParams(s).non_embedding) - unused);
}

// k routed experts of E, and one of its gates.
absl::Status CheckJob(const JobFile& job) {
  const ExpertShape& e = job.shape.experts;
  if (e.top_k < 1 || e.top_k > e.experts) {
    return absl::InvalidArgumentError("job: field 'experts.top_k' must be between 1 and count");
  }
  if (!IsMoeGateName(job.gate)) {
    return absl::InvalidArgumentError(
        "job: field 'gate' must be softmax, pre_softmax or sigmoid for family moe");
  }
  return absl::OkStatus();
}

}  // namespace

FamilyTraits MoeFamily() {
  FamilyTraits t;
  t.id = Family::kMoe;
  t.name = "moe";
  t.recomputes = false;
  t.routing = RoutingKind::kExperts;
  t.expert_mlp_params = &Params;
  t.expert_mlp_flops = &Flops;
  t.expert_mlp_active_params = &ActiveMlpParams;
  t.expert_sparsity = &ExpertSparsity;
  t.active_params = &Active;
  t.check_job = &CheckJob;
  t.label = [](const RunFields& r) { return absl::StrFormat("MoE E=%d k=%d", r.experts, r.top_k); };
  // Plotted beside the X-MoD point it was sized against (same total parameters).
  t.series = [](const RunFields& r) {
    return absl::StrFormat("MoE baseline (top-%d, at its X-MoD point's sparsity)", r.top_k);
  };
  t.plot_rank = 3;
  t.options_key = "experts";
  t.read_options = &ReadExpertOptions;
  t.write_options = &WriteExpertOptions;
  return t;
}

}  // namespace xmod
