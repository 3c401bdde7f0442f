// The least-squares fit of a two-stage law with every parameter free at once:
// the dense law's five at each context (one block per context) and the law's
// extras shared by all contexts. It is what the lack-of-fit test's degrees of
// freedom count (analysis.cc, FreeParameters). The two-stage fit freezes the
// first stage's estimation error into every sparse residual, where the F-test
// reads it as misfit: under a law's own form F then averaged 1.5-1.7 instead of
// about 1 and rejected the true form 3-7 times as often as its level. Started
// from the two-stage least-squares optimum, which lies close by; one local solve.
#ifndef XMOD_ORCHESTRATOR_FIT_JOINT_REFIT_H_
#define XMOD_ORCHESTRATOR_FIT_JOINT_REFIT_H_

#include <ceres/ceres.h>

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "orchestrator/fit/law.h"
#include "orchestrator/fit/stages.h"

namespace xmod {

namespace joint_internal {

// The log-loss residuals of one context's points under that context's dense
// block and the shared extras.
template <typename Law>
struct ContextResiduals {
  static constexpr int kDense = Law::kDenseParameters;
  static constexpr int kExtras = Law::kParameters - kDense;
  std::vector<LawPoint> points;  // without a frozen reference
  std::vector<double> log_loss;

  template <typename T>
  bool operator()(const T* dense, const T* extras, T* residuals) const {
    using std::isfinite;
    T p[Law::kParameters];
    for (int k = 0; k < kDense; ++k) p[k] = dense[k];
    for (int k = 0; k < kExtras; ++k) p[kDense + k] = extras[k];
    for (size_t i = 0; i < points.size(); ++i) {
      residuals[i] = Law::LogLoss(p, points[i]) - log_loss[i];
      if (!isfinite(residuals[i])) return false;  // Ceres rejects the step
    }
    return true;
  }
};

// Bounds and frozen parameters (--fix) of one block: parameters [first, first + size).
inline void Constrain(ceres::Problem* problem, double* block, int first, int size,
                      const std::vector<std::pair<double, double>>& bounds,
                      const std::vector<std::optional<double>>& fixed) {
  std::vector<int> frozen;
  for (int k = 0; k < size; ++k) {
    const int j = first + k;
    if (j < static_cast<int>(fixed.size()) && fixed[j].has_value()) {
      block[k] = *fixed[j];
      frozen.push_back(k);
      continue;
    }
    if (std::isfinite(bounds[j].first)) problem->SetParameterLowerBound(block, k, bounds[j].first);
    if (std::isfinite(bounds[j].second)) {
      problem->SetParameterUpperBound(block, k, bounds[j].second);
    }
  }
  if (static_cast<int>(frozen.size()) == size) {
    problem->SetParameterBlockConstant(block);
  } else if (!frozen.empty()) {
    problem->SetManifold(block, new ceres::SubsetManifold(size, frozen));
  }
}

}  // namespace joint_internal

// The predicted log-loss of each of `points` (in order) at the joint least-squares
// optimum, started from `start` (a two-stage fit of the same points: its dense fit
// per context and its extras). `fixed` holds --fix's values (internal units).
template <typename Law>
absl::StatusOr<std::vector<double>> JointLogLoss(const std::vector<LawPoint>& points,
                                                 const Fitted& start, const Fixed& fixed) {
  constexpr int kDense = Law::kDenseParameters, kP = Law::kParameters;
  using Residuals = joint_internal::ContextResiduals<Law>;
  const auto bounds = Law::Bounds();
  if (static_cast<int>(start.extras.raw.size()) != kP) {
    return absl::InvalidArgumentError("the joint refit needs a two-stage fit to start from");
  }
  std::vector<std::vector<double>> dense;  // one block per context of start.dense
  for (const ContextFit& c : start.dense) dense.emplace_back(c.fit.raw.begin(), c.fit.raw.end());
  std::vector<double> extras(start.extras.raw.begin() + kDense, start.extras.raw.end());
  std::vector<size_t> block_of(points.size());
  std::vector<Residuals> groups(dense.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const ContextFit* c = AtContext(start.dense, points[i].context);
    if (c == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no dense law at T = ", points[i].context, " for the joint refit"));
    }
    block_of[i] = static_cast<size_t>(c - start.dense.data());
    LawPoint x = points[i];
    x.has_reference = false;
    groups[block_of[i]].points.push_back(x);
    groups[block_of[i]].log_loss.push_back(std::log(x.loss));
  }
  ceres::Problem problem;
  for (size_t b = 0; b < groups.size(); ++b) {
    if (groups[b].points.empty()) continue;
    const int n = static_cast<int>(groups[b].points.size());
    problem.AddResidualBlock(
        new ceres::AutoDiffCostFunction<Residuals, ceres::DYNAMIC, kDense, kP - kDense>(
            new Residuals(groups[b]), n),
        nullptr, dense[b].data(), extras.data());
    joint_internal::Constrain(&problem, dense[b].data(), 0, kDense, bounds, fixed.all);
  }
  joint_internal::Constrain(&problem, extras.data(), kDense, kP - kDense, bounds, fixed.all);
  ceres::Solver::Options solver;
  solver.linear_solver_type = ceres::DENSE_QR;
  solver.max_num_iterations = 500;
  solver.function_tolerance = 1e-14;
  solver.gradient_tolerance = 1e-16;
  solver.parameter_tolerance = 1e-12;
  solver.logging_type = ceres::SILENT;
  ceres::Solver::Summary summary;
  ceres::Solve(solver, &problem, &summary);
  if (!summary.IsSolutionUsable()) {
    return absl::InternalError(absl::StrCat("the joint refit failed: ", summary.message));
  }
  std::vector<double> out;
  for (size_t i = 0; i < points.size(); ++i) {
    double p[kP];
    std::copy(dense[block_of[i]].begin(), dense[block_of[i]].end(), p);
    std::copy(extras.begin(), extras.end(), p + kDense);
    LawPoint x = points[i];
    x.has_reference = false;
    out.push_back(Law::LogLoss(p, x));
  }
  return out;
}

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_JOINT_REFIT_H_
