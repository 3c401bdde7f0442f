#include "orchestrator/sweep/family/families.h"

namespace xmod {

namespace {

// The table: one row per family (its sweep side in <name>.cc). A row leaves a
// member null where the default serves: one point as a baseline, counted once.
const std::vector<SweepFamily>& Table() {
  static const std::vector<SweepFamily>* const table = new std::vector<SweepFamily>{
      DenseSweepFamily(), XmodSweepFamily(), ModSweepFamily(), MoeSweepFamily(), DecoSweepFamily(),
  };
  return *table;
}

}  // namespace

const std::vector<SweepFamily>& SweepFamilies() { return Table(); }

const SweepFamily& SweepFamilyOf(Family family) {
  for (const SweepFamily& f : Table()) {
    if (f.id == family) return f;
  }
  return Table().front();  // unreachable: every family has a row (expand_test)
}

}  // namespace xmod
