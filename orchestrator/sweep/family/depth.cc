// The depth-routing families on the sweep side. X-MoD: one point per sparsity and
// anchor stride of the block, FLOP-matched to the dense model under match: flops,
// with the variance-scaled gate, the balance and router coefficients. MoD: the
// configuration of Raposo et al. (2024), 12.5% capacity at every other layer, with
// its sigmoid gate and router coefficient.
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

std::vector<GridPoint> XmodPoints(const SweepSpec& /*spec*/, const GridBlock& block) {
  std::vector<GridPoint> points;
  for (double sparsity : block.sparsity) {
    for (int64_t stride : block.stride) points.push_back({Family::kXmod, sparsity, stride});
  }
  return points;
}

int64_t XmodCount(const SweepSpec& /*spec*/, const GridBlock& block) {
  return SaturatingProduct(
      {static_cast<int64_t>(block.sparsity.size()), static_cast<int64_t>(block.stride.size())});
}

void XmodRouting(const SweepSpec& spec, ResolvedJob* job) {
  job->file.gate = "variance_scaled";
  job->file.balance_coef = spec.train.balance_coef;
  job->file.router_coef = spec.train.router_coef;
}

std::vector<GridPoint> ModPoints(const SweepSpec& /*spec*/, const GridBlock& /*block*/) {
  return {GridPoint{Family::kMod, 0.875, 2}};
}

void ModRouting(const SweepSpec& spec, ResolvedJob* job) {
  job->file.gate = "sigmoid";
  job->file.router_coef = spec.train.router_coef;
}

}  // namespace

SweepFamily XmodSweepFamily() {
  SweepFamily f;
  f.id = Family::kXmod;
  f.sparsity_axis = AxisRule::kRequired;
  f.stride_axis = AxisRule::kRequired;
  f.points = &XmodPoints;
  f.count = &XmodCount;
  // As a baseline X-MoD adds nothing (its points are the grid's own).
  f.baseline_points = [](const SweepSpec&, const GridBlock&, const std::vector<GridPoint>&) {
    return std::vector<GridPoint>{};
  };
  f.shape = &DepthShape;
  f.routing = &XmodRouting;
  return f;
}

SweepFamily ModSweepFamily() {
  SweepFamily f;
  f.id = Family::kMod;
  f.points = &ModPoints;
  f.count = [](const SweepSpec&, const GridBlock&) -> int64_t { return 1; };
  f.baseline_points = [](const SweepSpec& spec, const GridBlock& block,
                         const std::vector<GridPoint>&) { return ModPoints(spec, block); };
  f.shape = &DepthShape;
  f.routing = &ModRouting;
  return f;
}

}  // namespace xmod
