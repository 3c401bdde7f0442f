// The depth-routing families (docs/metrics.md): layers between anchors (every
// stride-th layer) process only the k = max(1, round(ρ·T)) tokens a d→1 router
// picks. X-MoD scales the routed update with a learnable gate γ and is evaluated
// with causal threshold routing as well as top-k; MoD (Raposo et al. 2024) uses the
// router weight itself, and is evaluated the same way.
#include "absl/strings/str_format.h"
#include "common/families/families.h"

namespace xmod {

FamilyTraits XmodFamily() {
  FamilyTraits t;
  t.id = Family::kXmod;
  t.name = "xmod";
  t.routing = RoutingKind::kDepth;
  t.routed_gate = true;
  t.causal_eval = true;
  t.label = [](const RunFields& r) {
    return absl::StrFormat("X-MoD ρ=%g s=%d", r.capacity, r.stride);
  };
  t.series = [](const RunFields& r) { return absl::StrFormat("X-MoD, stride s=%d", r.stride); };
  t.plot_rank = 2;
  return t;
}

FamilyTraits ModFamily() {
  FamilyTraits t;
  t.id = Family::kMod;
  t.name = "mod";
  t.routing = RoutingKind::kDepth;
  t.causal_eval = true;
  t.label = [](const RunFields& r) {
    return absl::StrFormat("MoD (ρ=%g, s=%d)", r.capacity, r.stride);
  };
  t.series = [](const RunFields& r) { return absl::StrFormat("MoD baseline (s=%d)", r.stride); };
  t.plot_rank = 1;
  return t;
}

}  // namespace xmod
