// The echo family on the sweep side: one point per block or baseline, sized as
// the dense model of its scale, with the echo section's options in its job file.
#include <cstdlib>
#include <iostream>

#include "common/status_macros.h"
#include "orchestrator/sweep/family/sweep_family.h"
#include "tests/plugins/echo_family.h"

namespace xmod::testing {

namespace {

nlohmann::json Defaults() { return {{"depth_factor", 1.0}}; }

void ParseSection(SectionReader& r) {
  r.Keys({"depth_factor"});
  r.Number("depth_factor", 1.0, 1e3, false);
}

std::vector<GridPoint> Points(const SweepSpec&, const GridBlock&) {
  return {GridPoint{EchoFamily(), 0.0, 1}};
}

absl::Status Shape(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                   int64_t context, const GridPoint& point, ResolvedJob* job) {
  GridPoint dense = point;
  dense.family = Family::kDense;
  RETURN_IF_ERROR(DepthShape(spec, block, scale, context, dense, job));
  job->file.shape.family = EchoFamily();
  return absl::OkStatus();
}

void Routing(const SweepSpec& spec, ResolvedJob* job) {
  job->file.gate = "none";
  job->file.family_options = SectionOptions(spec, SweepFamilyOf(EchoFamily()));
}

[[maybe_unused]] const bool kRegistered = [] {
  SweepFamily f;
  f.id = EchoFamily();
  f.section = "echo";
  f.section_defaults = &Defaults;
  f.parse_section = &ParseSection;
  f.points = &Points;
  f.count = [](const SweepSpec&, const GridBlock&) -> int64_t { return 1; };
  f.shape = &Shape;
  f.routing = &Routing;
  if (absl::Status s = RegisterSweepFamily(f); !s.ok()) {
    std::cerr << "echo family: " << s << "\n";
    std::abort();
  }
  return true;
}();

}  // namespace

}  // namespace xmod::testing
