#include "worker/model/family/families.h"

#include "worker/model/family/family.h"

namespace xmod {

namespace {

using namespace family;  // NOLINT: the table names each family's functions

// One row per family. Adding one: its file beside these, a row here.
// clang-format off
const ModelFamily kModelFamilies[] = {
    // id           build_layer  init_depth       objectives      causal_eval recompute
    {Family::kDense, DenseLayer, LayerCountDepth, NoObjectives,   false,      true},
    {Family::kXmod,  XmodLayer,  XmodInitDepth,   XmodObjectives, true,       true},
    {Family::kMod,   ModLayer,   LayerCountDepth, ModObjectives,  true,       true},
    {Family::kMoe,   MoeLayer,   LayerCountDepth, MoeObjectives,  false,      false},
    {Family::kDeco,  DecoLayer,  LayerCountDepth, DecoObjectives, false,      false},
};
// clang-format on

}  // namespace

const ModelFamily& ModelFamilyOf(Family family) {
  for (const ModelFamily& f : kModelFamilies) {
    if (f.id == family) return f;
  }
  TORCH_CHECK(false, "no model family ", FamilyName(family));
}

}  // namespace xmod
