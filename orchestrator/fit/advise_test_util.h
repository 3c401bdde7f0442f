// Runs of synthetic X-MoD sweeps for the advice's tests (advise_test.cc,
// decision_holdout_test.cc).
#ifndef XMOD_ORCHESTRATOR_FIT_ADVISE_TEST_UTIL_H_
#define XMOD_ORCHESTRATOR_FIT_ADVISE_TEST_UTIL_H_

#include <cmath>

#include "orchestrator/fit/law.h"

namespace xmod::advise_test {

// N_total / N_active of a FLOP-matched X-MoD model: the layers that keep the
// dense model's FLOPs when the routed ones run at capacity ρ.
inline double Ratio(double capacity, double stride) {
  return 1.0 / (1.0 / stride + capacity * (1.0 - 1.0 / stride));
}

// A run of N_active `n` on `d` tokens at context T: dense for stride 1, else an
// X-MoD model of 12 dense-equivalent layers at (capacity, stride). Loss 1.
inline LawPoint XModRun(double n, double d, double capacity, double stride, double context) {
  LawPoint x;
  x.n = n;
  x.d = d;
  x.context = context;
  x.loss = 1.0;
  if (stride > 1) {
    x.family = "xmod";
    x.capacity = capacity;
    x.stride = stride;
    x.n_total = n * Ratio(capacity, stride);
    x.layers = std::round(12 * Ratio(capacity, stride));
  } else {
    x.family = "dense";
  }
  return x;
}

}  // namespace xmod::advise_test

#endif  // XMOD_ORCHESTRATOR_FIT_ADVISE_TEST_UTIL_H_
