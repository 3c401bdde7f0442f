#include "common/family.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/families/families.h"

namespace xmod {

namespace {

std::deque<FamilyTraits>& Registry() {
  // The table: one row per built-in family (its traits live in
  // common/families/<name>.cc); RegisterFamily appends.
  static std::deque<FamilyTraits>* const table = new std::deque<FamilyTraits>{
      DenseFamily(), XmodFamily(), ModFamily(), MoeFamily(), DecoFamily(), MolFamily(), GdnFamily(),
  };
  return *table;
}

bool IsIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 32 || !absl::ascii_islower(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') return false;
  }
  return true;
}

}  // namespace

const std::deque<FamilyTraits>& Families() { return Registry(); }

absl::StatusOr<Family> RegisterFamily(FamilyTraits traits) {
  if (!IsIdentifier(traits.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("family name '", std::string(traits.name),
                     "' must be 1-32 characters of a-z, 0-9 and _, starting with a letter"));
  }
  std::deque<FamilyTraits>& table = Registry();
  for (const FamilyTraits& f : table) {
    if (f.name == traits.name) {
      return absl::AlreadyExistsError(
          absl::StrCat("family '", std::string(traits.name), "' is registered already"));
    }
  }
  // The built-in rows hold ids 0..5 in order, so a row's id is its index.
  traits.id = static_cast<Family>(static_cast<int32_t>(table.size()));
  table.push_back(traits);
  return traits.id;
}

const FamilyTraits& Traits(Family family) {
  // A row's id is its index (the built-in rows are in enumerator order; FamilyTable
  // in accounting_test checks it); an id from no table falls back to dense.
  const std::deque<FamilyTraits>& table = Families();
  const auto index = static_cast<size_t>(family);
  return index < table.size() ? table[index] : table.front();
}

std::string_view FamilyName(Family family) { return Traits(family).name; }

absl::StatusOr<Family> ParseFamily(std::string_view name) {
  std::vector<std::string> known;
  for (const FamilyTraits& traits : Families()) {
    if (traits.name == name) return traits.id;
    known.emplace_back(traits.name);
  }
  const std::string list = absl::StrJoin(known, ", ");
  return absl::InvalidArgumentError(
      absl::StrCat("unknown family '", std::string(name), "' (known: ", list, ")"));
}

std::string FamilyLabel(Family family, const RunFields& run) {
  const FamilyTraits& t = Traits(family);
  return t.label != nullptr ? t.label(run) : std::string(t.name);
}

std::string FamilySeries(Family family, const RunFields& run) {
  const FamilyTraits& t = Traits(family);
  return t.series != nullptr ? t.series(run) : std::string(t.name);
}

int FamilyPlotRank(Family family) {
  const FamilyTraits& t = Traits(family);
  if (t.plot_rank != 0 || family == Family::kDense) return t.plot_rank;
  return 100 + static_cast<int32_t>(family);  // registered: after the built-in ones
}

}  // namespace xmod
