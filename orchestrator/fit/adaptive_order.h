// The law-driven job order (`resources.order: adaptive`, docs/order.md): given the
// dense law's points so far and the pending jobs it will read, which job to train
// next. The criterion is sequential c-optimal design: linearise the fitted law, and
// take the job whose result is expected to shrink the variance of the law's
// prediction at a target (N, D) the most per training FLOP. Torch-free and
// store-free, so the coordinator's refitter and the simulation test share it.
#ifndef XMOD_ORCHESTRATOR_FIT_ADAPTIVE_ORDER_H_
#define XMOD_ORCHESTRATOR_FIT_ADAPTIVE_ORDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/fitter.h"
#include "orchestrator/fit/law.h"

namespace xmod {

// A job the law would read once it has run: its (N, D) and what it costs.
struct OrderCandidate {
  std::string id;
  LawPoint x;         // n and d are read; loss is not
  double cost = 0.0;  // training FLOPs still to spend on it (> 0)
};

struct AdaptiveOrder {
  // False: the points cannot pin the law down yet (fewer than 6, or fewer than 3
  // distinct N or D) or the fit failed; `order` is then cheapest-first and `why`
  // says which.
  bool adaptive = false;
  std::string why;
  FitResult fit;  // the law fitted to the points (when adaptive)
  // Candidate ids in the order to train them: the greedy sequence, each pick
  // conditioning the next (so several groups leasing between two refits still
  // get a sensible order).
  std::vector<std::string> order;
  // For each entry of `order`: the relative variance of the target prediction
  // that the pick removes, as a fraction of what was left before it (0..1).
  std::vector<double> gain;
  // The linearised standard deviation of the log-loss predicted at the target,
  // in units of the per-point noise σ (σ itself cancels from the ranking).
  double target_sd_over_sigma = 0.0;
};

struct AdaptiveOrderOptions {
  FitOptions fit;
  // Previous optima (FitResult::optima) to start from beside a coarse grid; empty:
  // the law's full grid (slower, first fit).
  std::vector<std::vector<double>> warm;
};

// Orders `candidates` for the dense law fitted to `points` (each with a loss),
// predicting at `target` (its n and d). INVALID_ARGUMENT for a candidate with a
// non-positive cost or size, or a target that is not a positive (N, D).
absl::StatusOr<AdaptiveOrder> OrderByExpectedGain(const std::vector<LawPoint>& points,
                                                  const std::vector<OrderCandidate>& candidates,
                                                  const LawPoint& target,
                                                  const AdaptiveOrderOptions& options = {});

// The dense law's grid with every other value: 3^5 = 243 starts.
std::vector<std::vector<double>> CoarseDenseStarts();

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_ADAPTIVE_ORDER_H_
