// DECO on the sweep side (docs/baselines.md): one point per block or baseline,
// its expert count sized to the dense model's parameters, with the deco section's
// expert width, shared width, leading dense layers, target ratio and controller.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

std::vector<GridPoint> Points(const SweepSpec& /*spec*/, const GridBlock& /*block*/) {
  return OnePoint(Family::kDeco);
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(job->file.shape, RoutedShape(spec, scale, context, Family::kDense, 0.0, 1));
  ModelShape& s = job->file.shape;
  s.family = Family::kDeco;
  s.experts.width = spec.deco.expert_width;
  s.experts.shared_width = DecoSharedWidth(spec.deco, scale.d_ff);
  s.experts.dense_layers = std::min(spec.deco.dense_layers, s.n_layers);
  s.experts.target_ratio = spec.deco.target_ratio;
  job->matched_params = CountParams(DenseReference(s, scale.n_layers)).non_embedding;
  job->matched_to = "dense";
  return MatchExperts(spec, block, scale, point, job);
}

void SetRoutingFields(const SweepSpec& spec, ResolvedJob* job) {
  JobFile& f = job->file;
  f.gate = "relu";
  f.expert_training.entropy_init = spec.deco.entropy_init;
  f.expert_training.entropy_multiplier = spec.deco.entropy_multiplier;
  job->sparsity = 1.0 - spec.deco.target_ratio;
}

}  // namespace

SweepFamily DecoSweepFamily() {
  SweepFamily f;
  f.id = Family::kDeco;
  f.points = &Points;
  f.count = [](const GridBlock&) -> int64_t { return 1; };
  f.shape = &Shape;
  f.routing = &SetRoutingFields;
  f.sizing_note = [](const ModelShape& s) {
    return absl::StrCat(", shared ", s.experts.shared_width);
  };
  return f;
}

}  // namespace xmod
