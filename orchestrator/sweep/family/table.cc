#include "absl/strings/str_cat.h"
#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

// The table: one row per built-in family (its sweep side in <name>.cc), then the
// registered ones. A row leaves a member null where the default serves: one
// point as a baseline, counted once.
std::deque<SweepFamily>& Table() {
  static std::deque<SweepFamily>* const table = new std::deque<SweepFamily>{
      DenseSweepFamily(), XmodSweepFamily(), ModSweepFamily(), MoeSweepFamily(),
      DecoSweepFamily(),  MolSweepFamily(),  GdnSweepFamily(),
  };
  return *table;
}

}  // namespace

const std::deque<SweepFamily>& SweepFamilies() { return Table(); }

absl::Status RegisterSweepFamily(SweepFamily family) {
  std::deque<SweepFamily>& table = Table();
  for (const SweepFamily& f : table) {
    if (f.id == family.id) {
      return absl::AlreadyExistsError(absl::StrCat("family '", std::string(FamilyName(family.id)),
                                                   "' has a sweep side already"));
    }
    if (family.section != nullptr && f.section != nullptr &&
        std::string_view(f.section) == family.section) {
      return absl::AlreadyExistsError(
          absl::StrCat("sweep-file section '", family.section, "' is taken"));
    }
  }
  if (family.points == nullptr || family.count == nullptr || family.shape == nullptr ||
      family.routing == nullptr || (family.section != nullptr && family.parse_section == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("family '", std::string(FamilyName(family.id)),
                     "': a sweep side needs points, count, shape and routing (and "
                     "parse_section with a section)"));
  }
  table.push_back(family);
  return absl::OkStatus();
}

const SweepFamily* FindSweepFamily(Family family) {
  for (const SweepFamily& f : Table()) {
    if (f.id == family) return &f;
  }
  return nullptr;
}

const SweepFamily& SweepFamilyOf(Family family) {
  const SweepFamily* f = FindSweepFamily(family);
  return f != nullptr ? *f : Table().front();  // the parser refused such a family
}

nlohmann::json SectionOptions(const SweepSpec& spec, const SweepFamily& family) {
  nlohmann::json options =
      family.section_defaults != nullptr ? family.section_defaults() : nlohmann::json::object();
  if (family.section == nullptr) return options;
  auto it = spec.family_options.find(family.section);
  if (it != spec.family_options.end() && it->second.is_object()) options.update(it->second);
  return options;
}

}  // namespace xmod
