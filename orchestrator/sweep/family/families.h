// The built-in families' sweep sides, one file each; table.cc lists them.
#ifndef XMOD_ORCHESTRATOR_SWEEP_FAMILY_FAMILIES_H_
#define XMOD_ORCHESTRATOR_SWEEP_FAMILY_FAMILIES_H_

#include "orchestrator/sweep/family/sweep_family.h"

namespace xmod {

SweepFamily DenseSweepFamily();  // dense.cc
SweepFamily XmodSweepFamily();   // depth.cc
SweepFamily ModSweepFamily();    // depth.cc
SweepFamily MoeSweepFamily();    // moe.cc
SweepFamily DecoSweepFamily();   // deco.cc
SweepFamily MolSweepFamily();    // mol.cc
SweepFamily GdnSweepFamily();    // gdn.cc

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_FAMILY_FAMILIES_H_
