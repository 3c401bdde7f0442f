// The depth-routing families (docs/metrics.md): layers between anchors (every
// stride-th layer) process only the k = max(1, round(ρ·T)) tokens a d→1 router
// picks. X-MoD scales the routed update with a learnable gate γ and is evaluated
// with causal threshold routing as well as top-k; MoD (Raposo et al. 2024) uses the
// router weight itself, and is evaluated the same way.
#include "common/families/families.h"

namespace xmod {

FamilyTraits XmodFamily() {
  FamilyTraits t;
  t.id = Family::kXmod;
  t.name = "xmod";
  t.routing = RoutingKind::kDepth;
  t.routed_gate = true;
  t.causal_eval = true;
  return t;
}

FamilyTraits ModFamily() {
  FamilyTraits t;
  t.id = Family::kMod;
  t.name = "mod";
  t.routing = RoutingKind::kDepth;
  t.causal_eval = true;
  return t;
}

}  // namespace xmod
