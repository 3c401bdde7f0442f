// The dense decoder: every layer attention plus a SwiGLU MLP, no routing.
#include "common/families/families.h"

namespace xmod {

FamilyTraits DenseFamily() {
  FamilyTraits t;
  t.id = Family::kDense;
  t.name = "dense";
  t.routing = RoutingKind::kNone;
  return t;
}

}  // namespace xmod
