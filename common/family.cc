#include "common/family.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/families/families.h"

namespace xmod {

const std::vector<FamilyTraits>& Families() {
  // The table: one row per family (its traits live in common/families/<name>.cc).
  static const std::vector<FamilyTraits>* const table = new std::vector<FamilyTraits>{
      DenseFamily(), XmodFamily(), ModFamily(), MoeFamily(), DecoFamily(),
  };
  return *table;
}

const FamilyTraits& Traits(Family family) {
  for (const FamilyTraits& traits : Families()) {
    if (traits.id == family) return traits;
  }
  return Families().front();  // unreachable: every enumerator has a row (family_test)
}

std::string_view FamilyName(Family family) { return Traits(family).name; }

absl::StatusOr<Family> ParseFamily(std::string_view name) {
  std::vector<std::string> known;
  for (const FamilyTraits& traits : Families()) {
    if (traits.name == name) return traits.id;
    known.emplace_back(traits.name);
  }
  const std::string list = absl::StrJoin(known, ", ");
  if (name == "mol") {
    return absl::InvalidArgumentError(
        absl::StrCat("family 'mol' is not specified yet (known: ", list, ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown family '", std::string(name), "' (known: ", list, ")"));
}

}  // namespace xmod
