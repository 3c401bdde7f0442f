#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/sweep_family.h"

namespace xmod {

std::string ScaleWhere(const SweepSpec& spec, const ScaleSpec& scale) {
  const std::string field = absl::StrCat("scales.", scale.name);
  return spec.Where(field, spec.LineOf(field, scale.line));
}

absl::Status CheckSize(const SweepSpec& spec, const ScaleSpec& scale, const ModelShape& shape) {
  absl::Status size = CheckModelSize(shape);
  if (size.ok()) return size;
  return absl::InvalidArgumentError(
      absl::StrCat(ScaleWhere(spec, scale), std::string(FamilyName(shape.family)), " at context ",
                   shape.context, " with ", shape.n_layers, " layers: ", size.message()));
}

absl::StatusOr<ModelShape> RoutedShape(const SweepSpec& spec, const ScaleSpec& scale,
                                       int64_t context, Family family, double sparsity,
                                       int64_t stride) {
  ModelShape s;
  s.family = family;
  s.d_model = scale.d_model;
  s.n_heads = scale.n_heads;
  s.d_ff = scale.d_ff;
  s.vocab_size = spec.data.vocab_size;
  s.context = context;
  s.stride = stride;
  s.capacity = 1.0 - sparsity;
  s.n_layers = scale.n_layers;
  if (IsDenseRun(family, stride)) {
    s = DenseReference(s, scale.n_layers);
    RETURN_IF_ERROR(CheckSize(spec, scale, s));
    return s;
  }
  if (spec.match == MatchMode::kFlops) {
    auto layers =
        LayersMatchingFlops(s, ForwardFlopsPerToken(DenseReference(s, scale.n_layers)), kMaxLayers);
    if (!layers.ok()) {
      // The FLOP target is the scale's n_layers dense layers: point there.
      const std::string field = absl::StrCat("scales.", scale.name, ".n_layers");
      return absl::InvalidArgumentError(
          absl::StrCat(spec.Where(field, spec.LineOf(field, scale.line)),
                       std::string(FamilyName(family)), " at context ", context, ", sparsity ",
                       sparsity, ", stride ", stride, " cannot match the FLOPs of ", scale.n_layers,
                       " dense layers: ", layers.status().message(),
                       " (fewer dense layers, a lower sparsity or stride, or match: layers)"));
    }
    s.n_layers = *layers;
  }
  RETURN_IF_ERROR(CheckSize(spec, scale, s));
  return s;
}

std::pair<std::string, int> FamilyField(const SweepSpec& spec, const GridBlock& block,
                                        Family family) {
  std::vector<std::string> fields;
  if (block.family == family) {
    fields = {block.field + ".family", "family"};
  } else {
    const auto it = std::find(block.baselines.begin(), block.baselines.end(), family);
    const size_t i = static_cast<size_t>(it - block.baselines.begin());
    fields = {absl::StrCat(block.field, ".baselines[", i, "]"), absl::StrCat("baselines[", i, "]")};
  }
  for (const std::string& f : fields) {
    if (const int line = spec.LineOf(f, 0); line > 0) return {f, line};
  }
  return {block.field, block.line};
}

absl::Status MatchExperts(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                          const GridPoint& point, ResolvedJob* job) {
  ModelShape& s = job->file.shape;
  auto experts = ExpertsMatchingParams(s, job->matched_params);
  if (!experts.ok()) {
    const auto [field, line] = FamilyField(spec, block, point.family);
    return absl::InvalidArgumentError(
        absl::StrCat(spec.Where(field, line), "scale ", scale.name, ", context ", s.context, ", ",
                     std::string(FamilyName(point.family)), " sized against ", job->matched_to,
                     ": ", experts.status().message()));
  }
  s.experts.experts = *experts;
  return CheckSize(spec, scale, s);
}

absl::Status DepthShape(const SweepSpec& spec, const GridBlock& /*block*/, const ScaleSpec& scale,
                        int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(job->file.shape,
                   RoutedShape(spec, scale, context, point.family, point.sparsity, point.stride));
  return absl::OkStatus();
}

std::vector<GridPoint> OnePoint(Family family) { return {GridPoint{family, 0.0, 1}}; }

int64_t SaturatingProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (f <= 0) return 0;
    if (product > std::numeric_limits<int64_t>::max() / f)
      return std::numeric_limits<int64_t>::max();
    product *= f;
  }
  return product;
}

}  // namespace xmod
