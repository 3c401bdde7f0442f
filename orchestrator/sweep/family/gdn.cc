// gdn on the sweep side (docs/gated-deltanet.md): the scale's dense model with
// Gated DeltaNet as its token mixer, at the dense model's width and depth, one
// point per value of the gdn section's softmax_every (0: every layer DeltaNet; m:
// a hybrid keeping softmax attention in every m-th layer), as a block or as a
// baseline. Its stored sparsity is its share of layers without softmax attention.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

nlohmann::json Defaults() { return {{"softmax_every", nlohmann::json::array({0})}}; }

void ParseSection(SectionReader& r) {
  r.Keys({"softmax_every"});
  r.IntegerList("softmax_every", 0, OptionBound::kLayers);
  const nlohmann::json& o = r.options();
  if (o.contains("softmax_every") && o["softmax_every"].is_array()) {
    for (const auto& m : o["softmax_every"]) {
      if (m.get<int64_t>() == 1) {
        r.Error("softmax_every",
                "1 keeps softmax in every layer: that is the dense model (baselines: [dense]); "
                "give 0 (every layer Gated DeltaNet) or m >= 2");
      }
    }
  }
}

std::vector<int64_t> Periods(const SweepSpec& spec) {
  return SectionOptions(spec, SweepFamilyOf(Family::kGdn))["softmax_every"]
      .get<std::vector<int64_t>>();
}

std::vector<GridPoint> Points(const SweepSpec& spec, const GridBlock& /*block*/) {
  std::vector<GridPoint> points;
  for (int64_t m : Periods(spec)) {
    GridPoint p{Family::kGdn, 0.0, 1};
    p.softmax_every = m;
    points.push_back(p);
  }
  return points;
}

int64_t Count(const SweepSpec& spec, const GridBlock& /*block*/) {
  return static_cast<int64_t>(Periods(spec).size());
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& /*block*/, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(job->file.shape, RoutedShape(spec, scale, context, Family::kDense, 0.0, 1));
  job->file.shape.family = Family::kGdn;
  job->file.shape.softmax_every = point.softmax_every;
  return CheckSize(spec, scale, job->file.shape);
}

// Every softmax period fits in each scale's depth.
void CheckPeriods(const SweepSpec& spec, const GridBlock& block, int line, const SpecError& error) {
  const int field_line = spec.LineOf("gdn.softmax_every", line);
  for (const std::string& name : block.scales) {
    const ScaleSpec* scale = spec.FindScale(name);
    if (scale == nullptr) continue;
    for (int64_t m : Periods(spec)) {
      if (m > scale->n_layers) {
        error(field_line, "gdn.softmax_every",
              absl::StrCat("softmax_every ", m, " is more than the ", scale->n_layers,
                           " layers of scale ", name, ": no layer would keep softmax"));
      }
    }
  }
}

void CheckBlock(const SweepSpec& spec, const GridBlock& block, const std::string& /*prefix*/,
                int line, const SpecError& error) {
  CheckPeriods(spec, block, line, error);
}

void SetRoutingFields(const SweepSpec& /*spec*/, ResolvedJob* job) {
  job->file.gate = "none";
  const ModelShape& s = job->file.shape;
  int64_t softmax = 0;
  for (int64_t l = 0; l < s.n_layers; ++l) softmax += IsSoftmaxLayer(s, l) ? 1 : 0;
  job->sparsity = 1.0 - static_cast<double>(softmax) / static_cast<double>(s.n_layers);
}

}  // namespace

SweepFamily GdnSweepFamily() {
  SweepFamily f;
  f.id = Family::kGdn;
  f.section = "gdn";
  f.section_defaults = &Defaults;
  f.parse_section = &ParseSection;
  f.stride_axis = AxisRule::kAbsent;
  f.check_block = &CheckBlock;
  f.check_as_baseline = &CheckPeriods;
  f.points = &Points;
  f.count = &Count;
  f.baseline_points = [](const SweepSpec& spec, const GridBlock& block,
                         const std::vector<GridPoint>&) { return Points(spec, block); };
  f.baseline_count = [](const SweepSpec& spec, const GridBlock& block, int64_t) {
    return Count(spec, block);
  };
  f.shape = &Shape;
  f.routing = &SetRoutingFields;
  return f;
}

}  // namespace xmod
