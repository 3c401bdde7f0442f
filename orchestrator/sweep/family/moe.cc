// Top-k MoE on the sweep side (docs/baselines.md). A moe block: one point per
// sparsity, top_k and granularity, with E = k / (1 − S) experts of width
// d_ff / granularity. A moe baseline: sized to the total parameters of each X-MoD
// point of its block (or of the dense model beside any other block), at the moe
// section's top_k and granularity.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

// The moe: section (docs/baselines.md).
struct MoeOptions {
  int64_t top_k = 2;        // routed experts per token (a baseline's; the family's default axis)
  int64_t granularity = 2;  // d_e = d_ff / granularity (likewise)
  int64_t shared_experts = 0;
  std::string gate = "softmax";  // softmax | pre_softmax | sigmoid
  double balance_coef = 0.01;    // α of the Switch/GShard balancing loss
  double z_coef = 1e-3;          // β of the router z-loss
  double capacity_factor = 0.0;  // 0: dropless
  double bias_rate = 0.0;        // aux-loss-free bias balancing step (0: off)
};

// The section's keys are the struct's fields; a key the file leaves out keeps
// the field's default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MoeOptions, top_k, granularity, shared_experts,
                                                gate, balance_coef, z_coef, capacity_factor,
                                                bias_rate)

nlohmann::json Defaults() { return MoeOptions{}; }

void ParseSection(SectionReader& r) {
  r.Keys({"top_k", "granularity", "shared_experts", "gate", "balance_coef", "z_coef",
          "capacity_factor", "bias_rate"});
  r.Integer("top_k", 1, OptionBound::kExperts);
  r.Integer("granularity", 1, OptionBound::kHidden);
  r.Integer("shared_experts", 0, OptionBound::kExperts);
  r.Choice("gate", {"softmax", "pre_softmax", "sigmoid"});
  r.Number("balance_coef", 0.0, 1e3, false);
  r.Number("z_coef", 0.0, 1e3, false);
  r.Number("capacity_factor", 0.0, 1e3, false);
  r.Number("bias_rate", 0.0, 1.0, false);
}

MoeOptions OptionsOf(const SweepSpec& spec) {
  return SectionOptions(spec, SweepFamilyOf(Family::kMoe)).get<MoeOptions>();
}

// A moe block's top_k and granularity axes, or the moe: section's values.
std::vector<int64_t> TopKAxis(const SweepSpec& spec, const GridBlock& block) {
  return block.top_k.empty() ? std::vector<int64_t>{OptionsOf(spec).top_k} : block.top_k;
}

std::vector<int64_t> GranularityAxis(const SweepSpec& spec, const GridBlock& block) {
  return block.granularity.empty() ? std::vector<int64_t>{OptionsOf(spec).granularity}
                                   : block.granularity;
}

std::vector<GridPoint> Points(const SweepSpec& spec, const GridBlock& block) {
  std::vector<GridPoint> points;
  const std::vector<int64_t> top_k = TopKAxis(spec, block);
  const std::vector<int64_t> granularity = GranularityAxis(spec, block);
  for (double sparsity : block.sparsity) {
    for (int64_t k : top_k) {
      for (int64_t g : granularity) points.push_back({Family::kMoe, sparsity, 1, k, g});
    }
  }
  return points;
}

int64_t Count(const SweepSpec& /*spec*/, const GridBlock& block) {
  return SaturatingProduct(
      {static_cast<int64_t>(block.sparsity.size()),
       block.top_k.empty() ? 1 : static_cast<int64_t>(block.top_k.size()),
       block.granularity.empty() ? 1 : static_cast<int64_t>(block.granularity.size())});
}

std::vector<GridPoint> BaselinePoints(const SweepSpec& spec, const GridBlock& block,
                                      const std::vector<GridPoint>& own) {
  std::vector<GridPoint> points;
  const MoeOptions o = OptionsOf(spec);
  if (block.family == Family::kXmod) {
    for (const GridPoint& p : own) {
      points.push_back({Family::kMoe, 0.0, 1, o.top_k, o.granularity, true, p.sparsity, p.stride});
    }
  } else {
    // Beside a dense (or mod, deco) block: sized against the dense model.
    points.push_back({Family::kMoe, 0.0, 1, o.top_k, o.granularity, true, 0.0, 1});
  }
  return points;
}

int64_t BaselineCount(const SweepSpec& /*spec*/, const GridBlock& block, int64_t own_count) {
  return block.family == Family::kXmod ? std::min<int64_t>(own_count, int64_t{1} << 40) : 1;
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  ASSIGN_OR_RETURN(job->file.shape, RoutedShape(spec, scale, context, Family::kDense, 0.0, 1));
  ModelShape& s = job->file.shape;
  s.family = Family::kMoe;
  s.experts.top_k = point.top_k;
  s.experts.width = scale.d_ff / point.granularity;
  s.experts.shared = OptionsOf(spec).shared_experts;
  if (!point.match_xmod) {
    s.experts.experts = std::llround(double(point.top_k) / (1.0 - point.sparsity));
    return CheckSize(spec, scale, s);
  }
  ASSIGN_OR_RETURN(const ModelShape xmod, RoutedShape(spec, scale, s.context, Family::kXmod,
                                                      point.match_sparsity, point.match_stride));
  job->matched_params = CountParams(xmod).non_embedding;
  job->matched_to =
      IsDenseRun(Family::kXmod, point.match_stride)
          ? std::string("dense")
          : absl::StrCat("xmod sparsity ", point.match_sparsity, " stride ", point.match_stride);
  return MatchExperts(spec, block, scale, point, job);
}

// Every granularity divides each scale's d_ff.
void CheckGranularity(const SweepSpec& spec, const GridBlock& block,
                      const std::vector<int64_t>& granularity, const std::string& field, int line,
                      const SpecError& error) {
  for (const std::string& name : block.scales) {
    const ScaleSpec* scale = spec.FindScale(name);
    if (scale == nullptr) continue;
    for (int64_t g : granularity) {
      if (scale->d_ff % g != 0) {
        error(line, field,
              absl::StrCat("granularity ", g, " does not divide d_ff ", scale->d_ff, " of scale ",
                           name));
      }
    }
  }
}

// Every (sparsity, top_k) of a moe block makes a whole number of experts, and
// every granularity divides each scale's d_ff.
void CheckBlock(const SweepSpec& spec, const GridBlock& block, const std::string& prefix, int line,
                const SpecError& error) {
  const std::vector<int64_t> top_k = TopKAxis(spec, block);
  for (size_t i = 0; i < block.sparsity.size(); ++i) {
    const double sparsity = block.sparsity[i];
    const auto [field, value_line] = spec.AxisValueAt(prefix + ".sparsity", i, line);
    for (int64_t k : top_k) {
      const double experts = double(k) / (1.0 - sparsity);
      if (std::abs(experts - std::round(experts)) > 1e-6) {
        error(value_line, field,
              absl::StrCat("sparsity ", sparsity, " with top_k ", k, " needs ", experts,
                           " experts (E = top_k / (1 - sparsity) must be a whole number)"));
      } else if (experts > static_cast<double>(kMaxExperts)) {
        error(value_line, field,
              absl::StrCat("sparsity ", sparsity, " with top_k ", k, " needs ", experts,
                           " experts, more than 2^20 = ", kMaxExperts, " (", kBoundsDoc, ")"));
      }
    }
  }
  if (block.granularity.empty()) {
    CheckGranularity(spec, block, GranularityAxis(spec, block), "moe.granularity",
                     spec.LineOf("moe.granularity", line), error);
  } else {
    for (size_t i = 0; i < block.granularity.size(); ++i) {
      const auto [field, value_line] = spec.AxisValueAt(prefix + ".granularity", i, line);
      CheckGranularity(spec, block, {block.granularity[i]}, field, value_line, error);
    }
  }
}

// A moe baseline takes the moe section's granularity.
void CheckAsBaseline(const SweepSpec& spec, const GridBlock& block, int line,
                     const SpecError& error) {
  CheckGranularity(spec, block, {OptionsOf(spec).granularity}, "moe.granularity",
                   spec.LineOf("moe.granularity", line), error);
}

void SetRoutingFields(const SweepSpec& spec, ResolvedJob* job) {
  JobFile& f = job->file;
  const MoeOptions o = OptionsOf(spec);
  f.gate = o.gate;
  f.balance_coef = o.balance_coef;
  f.expert_training.z_coef = o.z_coef;
  f.expert_training.capacity_factor = o.capacity_factor;
  f.expert_training.bias_rate = o.bias_rate;
  // The sparsity of a moe job is its expert sparsity 1 − k/E, as the grid states it.
  job->sparsity = 1.0 - double(f.shape.experts.top_k) / double(f.shape.experts.experts);
}

}  // namespace

SweepFamily MoeSweepFamily() {
  SweepFamily f;
  f.id = Family::kMoe;
  f.section = "moe";
  f.section_defaults = &Defaults;
  f.parse_section = &ParseSection;
  f.sparsity_axis = AxisRule::kRequired;
  f.sparsity_hint = " (1 - top_k / experts)";
  f.stride_axis = AxisRule::kAbsent;
  f.expert_axes = true;
  f.check_block = &CheckBlock;
  f.check_as_baseline = &CheckAsBaseline;
  f.points = &Points;
  f.count = &Count;
  f.baseline_points = &BaselinePoints;
  f.baseline_count = &BaselineCount;
  f.shape = &Shape;
  f.routing = &SetRoutingFields;
  f.sizing_note = [](const ModelShape& s) {
    return absl::StrCat(s.experts.experts, " experts of width ", s.experts.width, ", top-",
                        s.experts.top_k);
  };
  return f;
}

}  // namespace xmod
