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

// What a candidate is worth per FLOP.
enum class OrderCriterion {
  // The variance of the target prediction its result is expected to remove
  // (c-optimal design; the shipped rule).
  kExpectedGain,
  // The width of its own predicted loss's interval (linearised sd): "least
  // certain per FLOP". Kept for the comparison in bench/order_bench.cc.
  kWidth,
};

struct AdaptiveOrderOptions {
  OrderCriterion criterion = OrderCriterion::kExpectedGain;
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

// A sweep trained one job at a time in some order, for the simulation test and
// bench/order_bench.cc: after each job the law is refitted (warm, as the
// coordinator does) and its prediction at `target` compared with `true_target`.
enum class SimulatedOrder { kCheapestFirst, kExpectedGain, kWidth };
struct OrderTrace {
  std::vector<std::string> order;  // the jobs as trained
  std::vector<double> flops;       // spent after each job
  std::vector<double> error;       // |predicted / true − 1| at the target; 1 before a fit
};
// `observed[i]` is the loss of `jobs[i]`. INVALID_ARGUMENT for mismatched sizes.
absl::StatusOr<OrderTrace> SimulateOrder(const std::vector<OrderCandidate>& jobs,
                                         const std::vector<double>& observed, SimulatedOrder rule,
                                         const LawPoint& target, double true_target,
                                         const FitOptions& fit);
// The synthetic sweep of the simulation: 5 scales (N = 2M..32M, doubling) x 5
// budgets (5..80 tokens per parameter, doubling), each costing 6ND.
std::vector<OrderCandidate> SyntheticDenseGrid();
// Hoffmann et al. 2022's fitted dense law (approach 3: E = 1.69, A = 406.4,
// B = 410.7, alpha = 0.34, beta = 0.28) as internal parameters (a, b, e, alpha, beta).
std::vector<double> ChinchillaLaw();

// The FLOPs after which the trace's error stays at or under `tolerance`; +inf
// when even the last job's error is above it.
double FlopsToReach(const OrderTrace& trace, double tolerance);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_ADAPTIVE_ORDER_H_
