#include "orchestrator/fit/law_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/fit/dense_context_law.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/gdn_law.h"
#include "orchestrator/fit/make_law.h"
#include "orchestrator/fit/moe_law.h"
#include "orchestrator/fit/mol_law.h"
#include "orchestrator/fit/xmod_law.h"

namespace xmod {

namespace {

// The table: one row per law. A new law is its header and a row here.
std::vector<LawSpec>* Table() {
  static std::vector<LawSpec>* const table = new std::vector<LawSpec>{
      MakeLawSpec<DenseLaw>(),      MakeLawSpec<XModLaw>(),         MakeLawSpec<MoeLaw>(),
      MakeLawSpec<XModScaledLaw>(), MakeLawSpec<DenseContextLaw>(), MakeLawSpec<MolLaw>(),
      MakeLawSpec<GdnLaw>(),
  };
  return table;
}

}  // namespace

const std::vector<LawSpec>& Laws() { return *Table(); }

const LawSpec* FindLaw(const std::string& name) {
  for (const LawSpec& law : Laws()) {
    if (law.name == name) return &law;
  }
  return nullptr;
}

std::vector<std::string> LawNames() {
  std::vector<std::string> names;
  for (const LawSpec& law : Laws()) names.push_back(law.name);
  return names;
}

std::string UnknownLaw(const std::string& name) {
  return absl::StrCat("unknown law '", name, "' (known: ", absl::StrJoin(LawNames(), ", "), ")");
}

std::vector<std::string> DefaultLaws(const SweepFamilies& families) {
  std::vector<std::string> names;
  for (const LawSpec& law : Laws()) {
    if (law.applies(families)) names.push_back(law.name);
  }
  return names;
}

absl::Status RegisterLaw(LawSpec spec) {
  if (FindLaw(spec.name) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("law '", spec.name, "' is registered already"));
  }
  Table()->push_back(std::move(spec));
  return absl::OkStatus();
}

}  // namespace xmod
