// Calibration (docs/planner.md, "Calibration"): the efficiencies of cluster.h
// fitted to measured throughput, so that the performance model predicts what a
// cluster does rather than what its datasheet promises. The fit minimises the
// squared log-ratio of predicted to measured tokens/s over the runs, plus a weak
// pull of each efficiency (in log space, sd 2 e-folds... see kPriorSigma) towards
// the profile's starting value, so that a parameter the runs do not inform stays
// where the profile put it instead of wandering to a bound. Ceres solves it
// (Levenberg-Marquardt with bounds, numeric derivatives).
#ifndef XMOD_ORCHESTRATOR_PLAN_CALIBRATE_H_
#define XMOD_ORCHESTRATOR_PLAN_CALIBRATE_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/plan_csv.h"

namespace xmod {

struct CalibrationResult {
  Efficiency efficiency;
  bool converged = false;
  int rows = 0;
  // |predicted / measured − 1| over the rows, before and after.
  double median_error_before = 0, median_error = 0, p90_error = 0, max_error = 0;
  std::vector<double> predicted;  // tokens/s per row, after
};

// Fits `cluster`'s efficiencies (starting from `start`) to the measured rows.
absl::StatusOr<CalibrationResult> Calibrate(const ClusterProfile& cluster, const Efficiency& start,
                                            const std::vector<PlanRow>& rows);

// CAL.json: the cluster's name, the efficiencies, the fit's summary and every
// row's measured and predicted throughput.
nlohmann::json CalibrationToJson(const ClusterProfile& cluster, const CalibrationResult& r,
                                 const std::vector<PlanRow>& rows);
// Reads CAL.json for `cluster`; refuses one calibrated for another profile.
absl::StatusOr<Efficiency> LoadCalibration(const std::string& path, const ClusterProfile& cluster);

// The median and the 90th percentile of |x|.
double MedianAbs(std::vector<double> x);
double PercentileAbs(std::vector<double> x, double q);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_CALIBRATE_H_
