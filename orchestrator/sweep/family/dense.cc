// The dense model on the sweep side: one point per block, no routing fields.
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

std::vector<GridPoint> Points(const SweepSpec& /*spec*/, const GridBlock& /*block*/) {
  return OnePoint(Family::kDense);
}

void SetRoutingFields(const SweepSpec& /*spec*/, ResolvedJob* job) { job->file.gate = "none"; }

}  // namespace

SweepFamily DenseSweepFamily() {
  SweepFamily f;
  f.id = Family::kDense;
  f.points = &Points;
  f.count = [](const SweepSpec&, const GridBlock&) -> int64_t { return 1; };
  f.shape = &DepthShape;
  f.routing = &SetRoutingFields;
  return f;
}

}  // namespace xmod
