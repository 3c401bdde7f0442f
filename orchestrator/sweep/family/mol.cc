// Mixture of Layers on the sweep side (docs/mol.md). A mol block: one point per
// block sparsity σ_b = 1 − k/(N − S) of its sparsity axis, the routed block count
// N − S = k/(1 − σ_b) at the mol section's top_k. A mol baseline: one point at the
// section's blocks, shared and top_k. Either way the thin width is d_model /
// thin_divisor and, under match: flops, the stage count is the one whose FLOPs per
// token come closest to the scale's dense model (under match: layers, the scale's
// n_layers stages).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/mol_accounting.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

// The mol: section (docs/mol.md, sweeps/README.md).
struct MolOptions {
  int64_t thin_divisor = 4;              // d_t = d_model / thin_divisor (the paper's 256 of 1024)
  int64_t blocks = 5;                    // N, shared and routed, of a baseline
  int64_t shared = 1;                    // S
  int64_t top_k = 2;                     // k of the routed blocks
  std::string routed_attention = "gdn";  // gdn | softmax
  double balance_coef = 0.05;            // α of the CV² balancing loss
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MolOptions, thin_divisor, blocks, shared, top_k,
                                                routed_attention, balance_coef)

nlohmann::json Defaults() { return MolOptions{}; }

MolOptions OptionsOf(const SweepSpec& spec) {
  return SectionOptions(spec, SweepFamilyOf(Family::kMol)).get<MolOptions>();
}

void ParseSection(SectionReader& r) {
  r.Keys({"thin_divisor", "blocks", "shared", "top_k", "routed_attention", "balance_coef"});
  r.Integer("thin_divisor", 1, OptionBound::kHidden);
  r.Integer("blocks", 2, OptionBound::kExperts);
  r.Integer("shared", 0, OptionBound::kExperts);
  r.Integer("top_k", 1, OptionBound::kExperts);
  r.Choice("routed_attention", {"gdn", "softmax"});
  r.Number("balance_coef", 0.0, 1e3, false);
  const nlohmann::json& o = r.options();
  const int64_t blocks = o.value("blocks", int64_t{5}), shared = o.value("shared", int64_t{1});
  const int64_t top_k = o.value("top_k", int64_t{2});
  if (shared >= blocks) {
    r.Error("shared", absl::StrCat("must leave at least one routed block (", shared, " shared of ",
                                   blocks, " blocks)"));
  } else if (top_k > blocks - shared) {
    r.Error("top_k", absl::StrCat("must be at most the ", blocks - shared, " routed blocks (",
                                  blocks, " blocks, ", shared, " shared)"));
  }
}

// The routed blocks N − S a block sparsity gives at `top_k`: k / (1 − σ_b).
double RoutedBlocks(double sparsity, int64_t top_k) {
  return static_cast<double>(top_k) / (1.0 - sparsity);
}

std::vector<GridPoint> Points(const SweepSpec& spec, const GridBlock& block) {
  std::vector<GridPoint> points;
  const int64_t k = OptionsOf(spec).top_k;
  for (double sparsity : block.sparsity) points.push_back({Family::kMol, sparsity, 1, k});
  return points;
}

std::vector<GridPoint> BaselinePoints(const SweepSpec& spec, const GridBlock& /*block*/,
                                      const std::vector<GridPoint>& /*own*/) {
  const MolOptions o = OptionsOf(spec);
  const double sparsity =
      1.0 - static_cast<double>(o.top_k) / static_cast<double>(o.blocks - o.shared);
  return {GridPoint{Family::kMol, sparsity, 1, o.top_k}};
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(const ModelShape dense,
                   RoutedShape(spec, scale, context, Family::kDense, 0.0, 1));
  const MolOptions o = OptionsOf(spec);
  ModelShape s = dense;
  s.family = Family::kMol;
  s.mol.thin_width = scale.d_model / o.thin_divisor;
  s.mol.shared = o.shared;
  s.mol.top_k = point.top_k;
  s.mol.blocks = o.shared + std::llround(RoutedBlocks(point.sparsity, point.top_k));
  s.mol.routed_deltanet = o.routed_attention == "gdn";
  job->matched_to = "dense";
  if (spec.match == MatchMode::kFlops) {
    auto stages = LayersMatchingFlops(s, ForwardFlopsPerToken(dense), kMaxLayers);
    if (!stages.ok()) {
      const auto [field, line] = FamilyField(spec, block, Family::kMol);
      return absl::InvalidArgumentError(
          absl::StrCat(spec.Where(field, line), "scale ", scale.name, ", context ", context,
                       ", mol sparsity ", point.sparsity, " cannot match the FLOPs of ",
                       scale.n_layers, " dense layers: ", stages.status().message()));
    }
    s.n_layers = *stages;
  }
  job->file.shape = s;
  return CheckSize(spec, scale, s);
}

// Every scale of the block gives a thin width that is a whole number of the
// model's heads (d_t = d_model / thin_divisor, a multiple of d_model / n_heads).
void CheckThinWidth(const SweepSpec& spec, const GridBlock& block, int line,
                    const SpecError& error) {
  const int64_t divisor = OptionsOf(spec).thin_divisor;
  const int field_line = spec.LineOf("mol.thin_divisor", line);
  for (const std::string& name : block.scales) {
    const ScaleSpec* scale = spec.FindScale(name);
    if (scale == nullptr || scale->n_heads < 1) continue;
    const int64_t head = scale->d_model / scale->n_heads;
    if (scale->d_model % divisor != 0 || (scale->d_model / divisor) % head != 0) {
      error(
          field_line, "mol.thin_divisor",
          absl::StrCat("d_model ", scale->d_model, " / thin_divisor ", divisor, " of scale ", name,
                       " is not a whole number of heads of width ", head,
                       " (d_model / n_heads): thin_divisor must divide n_heads ", scale->n_heads));
    }
  }
}

// Every block sparsity makes a whole number of routed blocks at the section's top_k.
void CheckBlock(const SweepSpec& spec, const GridBlock& block, const std::string& prefix, int line,
                const SpecError& error) {
  const MolOptions o = OptionsOf(spec);
  for (size_t i = 0; i < block.sparsity.size(); ++i) {
    const double sparsity = block.sparsity[i];
    const auto [field, value_line] = spec.AxisValueAt(prefix + ".sparsity", i, line);
    const double routed = RoutedBlocks(sparsity, o.top_k);
    if (std::abs(routed - std::round(routed)) > 1e-6) {
      error(value_line, field,
            absl::StrCat("block sparsity ", sparsity, " with mol.top_k ", o.top_k, " needs ",
                         routed, " routed blocks (top_k / (1 - sparsity) must be a whole number)"));
    } else if (routed + static_cast<double>(o.shared) > 1024.0) {
      error(value_line, field,
            absl::StrCat("block sparsity ", sparsity, " with mol.top_k ", o.top_k, " needs ",
                         routed, " routed blocks; a stage holds at most 1024 blocks"));
    }
  }
  CheckThinWidth(spec, block, line, error);
}

void CheckAsBaseline(const SweepSpec& spec, const GridBlock& block, int line,
                     const SpecError& error) {
  CheckThinWidth(spec, block, line, error);
}

void SetRoutingFields(const SweepSpec& spec, ResolvedJob* job) {
  job->file.gate = "none";
  job->file.balance_coef = OptionsOf(spec).balance_coef;
  const MolShape& m = job->file.shape.mol;
  // The sparsity of a mol job is its block sparsity 1 − k/(N − S).
  job->sparsity = 1.0 - static_cast<double>(m.top_k) / static_cast<double>(m.blocks - m.shared);
}

// "12 stages of 5 thin blocks of width 32 (1 shared, top-2 of 4 routed: gdn); the
// paper's convention counts ..." (docs/mol.md: its convention, next to xmod's own).
std::string SizingNote(const ModelShape& s) {
  const MolShape& m = s.mol;
  const MolPaperCount paper = MolPaperParams(s.d_model, m.thin_width, s.n_layers, m.blocks,
                                             m.shared, m.top_k, s.vocab_size);
  const auto size = [](int64_t n) {
    return n >= 100000000 ? absl::StrFormat("%.3fB", static_cast<double>(n) / 1e9)
                          : absl::StrFormat("%.2fM", static_cast<double>(n) / 1e6);
  };
  return absl::StrFormat(
      "%d stages of %d thin blocks of width %d (%d shared, top-%d of %d routed: %s); the "
      "paper's convention counts %d non-embedding (%s with the tied embedding), %d active (%s "
      "with it)",
      s.n_layers, m.blocks, m.thin_width, m.shared, m.top_k, m.blocks - m.shared,
      m.routed_deltanet ? "gdn" : "softmax", paper.total, size(paper.total + paper.embedding),
      paper.active, size(paper.active + paper.embedding));
}

}  // namespace

SweepFamily MolSweepFamily() {
  SweepFamily f;
  f.id = Family::kMol;
  f.section = "mol";
  f.section_defaults = &Defaults;
  f.parse_section = &ParseSection;
  f.sparsity_axis = AxisRule::kRequired;
  f.sparsity_hint = " (block sparsity 1 - top_k / routed blocks)";
  f.stride_axis = AxisRule::kAbsent;
  f.check_block = &CheckBlock;
  f.check_as_baseline = &CheckAsBaseline;
  f.points = &Points;
  f.count = [](const SweepSpec&, const GridBlock& block) {
    return static_cast<int64_t>(block.sparsity.size());
  };
  f.baseline_points = &BaselinePoints;
  f.shape = &Shape;
  f.routing = &SetRoutingFields;
  f.sizing_note = &SizingNote;
  return f;
}

}  // namespace xmod
