// DECO on the sweep side (docs/baselines.md): one point per block or baseline,
// its expert count sized to the dense model's parameters, with the deco section's
// expert width, shared width, leading dense layers, target ratio and controller.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

// The deco: section (docs/baselines.md).
struct DecoOptions {
  int64_t expert_width = 64;
  int64_t shared_width = 0;  // 0: min(128, round_up(d_ff / 15, 8)), DECO's 128 at its 0.1B scale
  int64_t dense_layers = 1;  // leading layers with a dense MLP (DECO: layer 0)
  double target_ratio = 0.2;
  double entropy_init = 1e-8;
  double entropy_multiplier = 1.002;
};

// The section's keys are the struct's fields; a key the file leaves out keeps
// the field's default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DecoOptions, expert_width, shared_width,
                                                dense_layers, target_ratio, entropy_init,
                                                entropy_multiplier)

nlohmann::json Defaults() { return DecoOptions{}; }

void ParseSection(SectionReader& r) {
  r.Keys({"expert_width", "shared_width", "dense_layers", "target_ratio", "entropy_init",
          "entropy_multiplier"});
  r.Integer("expert_width", 1, OptionBound::kHidden);
  if (r.Text("shared_width") != "auto") r.Integer("shared_width", 1, OptionBound::kHidden);
  r.Integer("dense_layers", 0, OptionBound::kLayers);
  r.Number("target_ratio", 0.0, 1.0, true);
  if (r.Has("target_ratio") && r.options().value("target_ratio", 1.0) <= 0) {
    r.Error("target_ratio", "must be positive");
  }
  r.Number("entropy_init", 0.0, 1e3, false);
  r.Number("entropy_multiplier", 1.0, 10.0, false);
}

DecoOptions OptionsOf(const SweepSpec& spec) {
  return SectionOptions(spec, SweepFamilyOf(Family::kDeco)).get<DecoOptions>();
}

std::vector<GridPoint> Points(const SweepSpec& /*spec*/, const GridBlock& /*block*/) {
  return OnePoint(Family::kDeco);
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(job->file.shape, RoutedShape(spec, scale, context, Family::kDense, 0.0, 1));
  ModelShape& s = job->file.shape;
  s.family = Family::kDeco;
  const DecoOptions o = OptionsOf(spec);
  s.experts.width = o.expert_width;
  s.experts.shared_width = o.shared_width > 0 ? o.shared_width : DecoDefaultSharedWidth(scale.d_ff);
  s.experts.dense_layers = std::min(o.dense_layers, s.n_layers);
  s.experts.target_ratio = o.target_ratio;
  job->matched_params = CountParams(DenseReference(s, scale.n_layers)).non_embedding;
  job->matched_to = "dense";
  return MatchExperts(spec, block, scale, point, job);
}

void SetRoutingFields(const SweepSpec& spec, ResolvedJob* job) {
  JobFile& f = job->file;
  f.gate = "relu";
  const DecoOptions o = OptionsOf(spec);
  f.expert_training.entropy_init = o.entropy_init;
  f.expert_training.entropy_multiplier = o.entropy_multiplier;
  job->sparsity = 1.0 - o.target_ratio;
}

}  // namespace

SweepFamily DecoSweepFamily() {
  SweepFamily f;
  f.id = Family::kDeco;
  f.section = "deco";
  f.section_defaults = &Defaults;
  f.parse_section = &ParseSection;
  f.points = &Points;
  f.count = [](const SweepSpec&, const GridBlock&) -> int64_t { return 1; };
  f.shape = &Shape;
  f.routing = &SetRoutingFields;
  f.sizing_note = [](const ModelShape& s) {
    return absl::StrCat(s.experts.experts, " experts of width ", s.experts.width, ", shared ",
                        s.experts.shared_width);
  };
  return f;
}

}  // namespace xmod
