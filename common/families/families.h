// The built-in families' traits, one file each; family.cc's table lists them.
#ifndef XMOD_COMMON_FAMILIES_FAMILIES_H_
#define XMOD_COMMON_FAMILIES_FAMILIES_H_

#include <nlohmann/json.hpp>

#include "common/family.h"

namespace xmod {

FamilyTraits DenseFamily();  // dense.cc
FamilyTraits XmodFamily();   // depth.cc
FamilyTraits ModFamily();    // depth.cc
FamilyTraits MoeFamily();    // moe.cc
FamilyTraits DecoFamily();   // deco.cc
FamilyTraits MolFamily();    // mol.cc
FamilyTraits GdnFamily();    // gdn.cc

// The "experts" options object of moe and deco (experts.cc).
absl::Status ReadExpertOptions(const nlohmann::json& object, JobFile* job);
nlohmann::json WriteExpertOptions(const JobFile& job);

}  // namespace xmod

#endif  // XMOD_COMMON_FAMILIES_FAMILIES_H_
