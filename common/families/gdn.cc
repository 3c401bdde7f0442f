// gdn: the dense decoder with Gated DeltaNet as its token mixer (docs/
// gated-deltanet.md): every layer, or in a hybrid every layer but each m-th,
// which keeps softmax attention (ModelShape::softmax_every). No routing. Its
// option is the job file's "gdn" object.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/families/families.h"
#include "common/job_file.h"
#include "common/json_reader.h"
#include "common/mol_accounting.h"

namespace xmod {

namespace {

using LD = long double;

int64_t SoftmaxLayers(const ModelShape& s) {
  return s.softmax_every > 0 ? s.n_layers / s.softmax_every : 0;
}

// All layers' parameters: a softmax layer 4d² + 3·d·d_ff + 2d (the standard
// block), a DeltaNet layer its mixer instead of the 4d² of attention.
LD LayersParams(const ModelShape& s) {
  const LD d = static_cast<LD>(s.d_model);
  const LD mlp = 3 * d * static_cast<LD>(s.d_ff) + 2 * d;
  const LD softmax = 4 * d * d + mlp;
  const LD deltanet = static_cast<LD>(DeltaNetMixerParams(s.d_model, s.d_model / s.n_heads)) + mlp;
  const LD soft = static_cast<LD>(SoftmaxLayers(s));
  return soft * softmax + (static_cast<LD>(s.n_layers) - soft) * deltanet;
}

double LayersActiveParams(const ModelShape& s) { return static_cast<double>(LayersParams(s)); }

// Forward FLOPs per token: a softmax layer 2·(4d² + 3·d·d_ff) + 4·T·d, a DeltaNet
// layer its mixer's (independent of T) and the MLP's.
double LayersFlops(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model), t = static_cast<double>(s.context);
  const double mlp = 2.0 * 3.0 * d * static_cast<double>(s.d_ff);
  const double softmax = 2.0 * 4.0 * d * d + 4.0 * t * d + mlp;
  const double deltanet = DeltaNetMixerFlops(s.d_model, s.d_model / s.n_heads) + mlp;
  const double soft = static_cast<double>(SoftmaxLayers(s));
  return soft * softmax + (static_cast<double>(s.n_layers) - soft) * deltanet;
}

absl::Status ReadOptions(const nlohmann::json& object, JobFile* job) {
  JsonReader r(object, "gdn.");
  r.Int("softmax_every", &job->shape.softmax_every);
  if (!r.status().ok()) return r.status();
  const int64_t m = job->shape.softmax_every;
  if (m < 0 || m == 1 || m > job->shape.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job: field 'gdn.softmax_every' must be 0 (every layer Gated DeltaNet) or between 2 and "
        "n_layers ",
        job->shape.n_layers, " (1 would be the dense model)"));
  }
  return absl::OkStatus();
}

nlohmann::json WriteOptions(const JobFile& job) {
  return nlohmann::json{{"softmax_every", job.shape.softmax_every}};
}

}  // namespace

FamilyTraits GdnFamily() {
  FamilyTraits t;
  t.id = Family::kGdn;
  t.name = "gdn";
  t.recomputes = false;
  t.routing = RoutingKind::kNone;
  t.layers_params = &LayersParams;
  t.layers_active_params = &LayersActiveParams;
  t.layers_flops = &LayersFlops;
  t.options_key = "gdn";
  t.read_options = &ReadOptions;
  t.write_options = &WriteOptions;
  // Its stored sparsity is the share of its layers without softmax attention.
  t.label = [](const RunFields& r) {
    return r.sparsity < 1.0
               ? absl::StrFormat("hybrid GDN (%.0f%% softmax layers)", 100.0 * (1.0 - r.sparsity))
               : std::string("dense GDN");
  };
  t.series = t.label;
  t.plot_rank = 6;
  return t;
}

}  // namespace xmod
