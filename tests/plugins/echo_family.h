// A model family that lives in the tests only, to show that a family is new
// files and table rows: `echo`, a dense decoder whose residual branches start
// smaller by an option of its own, depth_factor ≥ 1 (the output projections are
// initialised with std / sqrt(2 · depth_factor · n_layers)). A sweep gives it in
// its own section,
//   family: echo
//   echo: {depth_factor: 2}
// and the job file carries it as the object "echo": {"depth_factor": 2}, which
// the worker side reads. Each side registers its row from a static initialiser
// in its file (echo_family_sweep.cc in the test build of `xmod`,
// echo_family_model.cc in the test build of `xmod-worker`), after the torch-free
// traits (echo_family.cc, in both).
#ifndef XMOD_TESTS_PLUGINS_ECHO_FAMILY_H_
#define XMOD_TESTS_PLUGINS_ECHO_FAMILY_H_

#include "common/family.h"

namespace xmod::testing {

// Registers the echo family's traits once (later calls return the same id).
Family EchoFamily();

}  // namespace xmod::testing

#endif  // XMOD_TESTS_PLUGINS_ECHO_FAMILY_H_
