#include "orchestrator/plan/calibrate.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace xmod {

namespace {

// The fitted efficiencies, in log space, with their bounds.
struct Free {
  double Efficiency::*member;
  double lo;
  double hi;
};
constexpr Free kFree[] = {
    {&Efficiency::gemm_max, 0.2, 1.0},      {&Efficiency::gemm_half, 1e6, 1e13},
    {&Efficiency::attention, 0.05, 1.0},    {&Efficiency::memory, 0.1, 1.0},
    {&Efficiency::intra, 0.05, 1.0},        {&Efficiency::inter, 0.05, 1.0},
    {&Efficiency::overlap_drag, 1e-3, 1.0}, {&Efficiency::kernel_s, 1e-7, 1e-3},
    {&Efficiency::pressure, 1e-3, 10.0},    {&Efficiency::recompute, 0.3, 1.5},
};
constexpr int kParams = sizeof(kFree) / sizeof(kFree[0]);
// The pull towards the profile: one log-unit of departure from its value costs as
// much as a run predicted off by a factor e^kDataSigma (about 10%), the spread a
// measured throughput is trusted to.
constexpr double kPriorSigma = 1.0;
constexpr double kDataSigma = 0.1;

Efficiency FromLog(const Efficiency& base, const double* x) {
  Efficiency e = base;
  for (int i = 0; i < kParams; ++i) e.*kFree[i].member = std::exp(x[i]);
  return e;
}

struct Residuals {
  const ClusterProfile* cluster;
  const std::vector<PlanRow>* rows;
  Efficiency base;
  std::vector<double> start;  // log values

  bool operator()(double const* const* params, double* out) const {
    const Efficiency e = FromLog(base, params[0]);
    for (size_t i = 0; i < rows->size(); ++i) {
      const PlanRow& r = (*rows)[i];
      const Prediction p = Predict(r.model, r.layout, *cluster, e);
      out[i] = std::log(p.tokens_per_s / r.tokens_per_s) / kDataSigma;
    }
    for (int k = 0; k < kParams; ++k) {
      out[rows->size() + k] = (params[0][k] - start[k]) / kPriorSigma;
    }
    return true;
  }
};

std::vector<double> Errors(const ClusterProfile& cluster, const Efficiency& e,
                           const std::vector<PlanRow>& rows, std::vector<double>* predicted) {
  std::vector<double> errors;
  for (const PlanRow& r : rows) {
    const double p = Predict(r.model, r.layout, cluster, e).tokens_per_s;
    if (predicted != nullptr) predicted->push_back(p);
    errors.push_back(p / r.tokens_per_s - 1.0);
  }
  return errors;
}

}  // namespace

double PercentileAbs(std::vector<double> x, double q) {
  if (x.empty()) return 0;
  for (double& v : x) v = std::abs(v);
  std::sort(x.begin(), x.end());
  const double pos = q * static_cast<double>(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(x.size() - 1, lo + 1);
  return x[lo] + (pos - static_cast<double>(lo)) * (x[hi] - x[lo]);
}
double MedianAbs(std::vector<double> x) { return PercentileAbs(std::move(x), 0.5); }

absl::StatusOr<CalibrationResult> Calibrate(const ClusterProfile& cluster, const Efficiency& start,
                                            const std::vector<PlanRow>& rows) {
  if (rows.empty())
    return absl::InvalidArgumentError("calibration needs at least one measured run");
  CalibrationResult result;
  result.rows = static_cast<int>(rows.size());
  result.median_error_before = MedianAbs(Errors(cluster, start, rows, nullptr));

  std::vector<double> x(kParams);
  for (int i = 0; i < kParams; ++i) {
    const double v = std::clamp(start.*kFree[i].member, kFree[i].lo, kFree[i].hi);
    x[i] = std::log(v);
  }
  auto* functor = new Residuals{&cluster, &rows, start, x};
  auto* cost = new ceres::DynamicNumericDiffCostFunction<Residuals, ceres::CENTRAL>(functor);
  cost->AddParameterBlock(kParams);
  cost->SetNumResiduals(static_cast<int>(rows.size()) + kParams);
  ceres::Problem problem;
  problem.AddResidualBlock(cost, nullptr, x.data());
  for (int i = 0; i < kParams; ++i) {
    problem.SetParameterLowerBound(x.data(), i, std::log(kFree[i].lo));
    problem.SetParameterUpperBound(x.data(), i, std::log(kFree[i].hi));
  }
  ceres::Solver::Options options;
  options.max_num_iterations = 200;
  options.linear_solver_type = ceres::DENSE_QR;
  options.logging_type = ceres::SILENT;
  options.function_tolerance = 1e-10;
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);
  result.converged = summary.termination_type == ceres::CONVERGENCE;
  result.efficiency = FromLog(start, x.data());
  const std::vector<double> errors = Errors(cluster, result.efficiency, rows, &result.predicted);
  result.median_error = MedianAbs(errors);
  result.p90_error = PercentileAbs(errors, 0.9);
  result.max_error = PercentileAbs(errors, 1.0);
  return result;
}

nlohmann::json CalibrationToJson(const ClusterProfile& cluster, const CalibrationResult& r,
                                 const std::vector<PlanRow>& rows) {
  nlohmann::json j;
  j["cluster"] = cluster.name;
  j["efficiency"] = EfficiencyToJson(r.efficiency);
  j["fit"] = {{"rows", r.rows},
              {"converged", r.converged},
              {"median_error_before", r.median_error_before},
              {"median_error", r.median_error},
              {"p90_error", r.p90_error},
              {"max_error", r.max_error}};
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && i < r.predicted.size(); ++i) {
    runs.push_back({{"where", rows[i].where},
                    {"name", rows[i].name},
                    {"measured_tokens_per_s", rows[i].tokens_per_s},
                    {"predicted_tokens_per_s", r.predicted[i]}});
  }
  j["runs"] = runs;
  return j;
}

absl::StatusOr<Efficiency> LoadCalibration(const std::string& path, const ClusterProfile& cluster) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the calibration"));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object() || !j.contains("efficiency") || !j.contains("cluster") ||
      !j["cluster"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": expected {\"cluster\": NAME, \"efficiency\": {...}} "
                     "(what `xmod plan calibrate` writes)"));
  }
  if (j["cluster"].get<std::string>() != cluster.name) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": calibrated for cluster '", j["cluster"].get<std::string>(),
                     "', not '", cluster.name, "' (calibrate again with this profile)"));
  }
  return EfficiencyFromJson(j["efficiency"], path);
}

}  // namespace xmod
