// Fits a law (law.h) to observed runs: a Huber loss (delta 1e-3 by default) on
// log-loss residuals, summed over points, minimised with Ceres from every start of
// the law's grid; the best converged start is kept.
#ifndef XMOD_ORCHESTRATOR_FIT_FITTER_H_
#define XMOD_ORCHESTRATOR_FIT_FITTER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct FitOptions {
  double huber_delta = 1e-3;
  int threads = 0;  // starts solved in parallel; 0: hardware concurrency
};

struct FitResult {
  std::string law;
  std::map<std::string, double> params;  // the law's reported parameters
  std::vector<double> raw;               // the fitted internal parameters
  double objective = 0.0;  // summed Huber loss of log-loss residuals
  double rmse = 0.0;       // root mean square of log-loss residuals
  int n_points = 0;
  int starts = 0;
  bool converged = false;  // whether the best start's solver reported convergence
};

// INVALID_ARGUMENT when there are fewer points than parameters, a non-positive or
// non-finite value, or only one distinct N or D (the law would be degenerate).
absl::StatusOr<FitResult> FitDenseLaw(const std::vector<LawPoint>& points,
                                      const FitOptions& options = {});

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_FITTER_H_
