#include "worker/model/family/families.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "worker/model/family/family.h"

namespace xmod {

namespace {

using namespace family;  // NOLINT: the table names each family's functions

// One row per built-in family, then the registered ones (RegisterModelFamily).
// Adding one: its file beside these, a row here.
std::deque<ModelFamily>& Table() {
  // clang-format off
  static std::deque<ModelFamily>* const table = new std::deque<ModelFamily>{
      // id            build_layer  init_depth       objectives      causal_eval recompute configure
      {Family::kDense, DenseLayer, LayerCountDepth, NoObjectives,   false,      true,     nullptr},
      {Family::kXmod,  XmodLayer,  XmodInitDepth,   XmodObjectives, true,       true,     nullptr},
      {Family::kMod,   ModLayer,   LayerCountDepth, ModObjectives,  true,       true,     nullptr},
      {Family::kMoe,   MoeLayer,   LayerCountDepth, MoeObjectives,  false,      false,    MoeConfigure},
      {Family::kDeco,  DecoLayer,  LayerCountDepth, DecoObjectives, false,      false,    DecoConfigure},
      {Family::kMol,   MolLayer,   LayerCountDepth, MolObjectives,  false,      false,    MolConfigure},
      {Family::kGdn,   GdnLayer,   LayerCountDepth, NoObjectives,   false,      false,    GdnConfigure},
  };
  // clang-format on
  return *table;
}

}  // namespace

const ModelFamily& ModelFamilyOf(Family family) {
  for (const ModelFamily& f : Table()) {
    if (f.id == family) return f;
  }
  TORCH_CHECK(false, "family '", FamilyName(family), "' has no model in this worker build");
}

absl::Status RegisterModelFamily(ModelFamily family) {
  for (const ModelFamily& f : Table()) {
    if (f.id == family.id) {
      return absl::AlreadyExistsError(
          absl::StrCat("family '", std::string(FamilyName(family.id)), "' has a model already"));
    }
  }
  if (family.build_layer == nullptr || family.init_depth == nullptr ||
      family.objectives == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("family '", std::string(FamilyName(family.id)),
                     "': a model needs build_layer, init_depth and objectives"));
  }
  Table().push_back(family);
  return absl::OkStatus();
}

}  // namespace xmod
