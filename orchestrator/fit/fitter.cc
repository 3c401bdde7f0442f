#include "orchestrator/fit/fitter.h"

#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"

namespace xmod {

namespace {

template <typename Law>
struct Residual {
  explicit Residual(const LawPoint& p) : point(p), log_loss(std::log(p.loss)) {}
  template <typename T>
  bool operator()(const T* const p, T* residual) const {
    residual[0] = Law::LogLoss(p, point) - T(log_loss);
    return true;
  }
  LawPoint point;
  double log_loss;
};

// Ceres' HuberLoss(d) is rho(s) = s for s <= d², 2d·sqrt(s) − d² beyond, and the
// cost is ½·rho(r²): exactly huber(r, d) = ½r² | d(|r| − ½d).
template <typename Law>
double Objective(const double* p, const std::vector<LawPoint>& points, double delta,
                 double* rmse) {
  double sum = 0.0, squares = 0.0;
  for (const LawPoint& x : points) {
    const double r = Law::LogLoss(p, x) - std::log(x.loss);
    squares += r * r;
    sum += std::abs(r) <= delta ? 0.5 * r * r : delta * (std::abs(r) - 0.5 * delta);
  }
  *rmse = std::sqrt(squares / static_cast<double>(points.size()));
  return sum;
}

template <typename Law>
absl::StatusOr<FitResult> Fit(const std::vector<LawPoint>& points, const FitOptions& options) {
  constexpr int kP = Law::kParameters;
  if (static_cast<int>(points.size()) <= kP) {
    return absl::InvalidArgumentError(absl::StrCat("law ", Law::Name(), " has ", kP,
                                                   " parameters but only ", points.size(),
                                                   " points were given"));
  }
  std::set<double> ns, ds;
  for (const LawPoint& x : points) {
    if (!(x.n > 0 && x.d > 0 && x.loss > 0) || !std::isfinite(x.n * x.d * x.loss)) {
      return absl::InvalidArgumentError(absl::StrCat("a point has a non-positive or non-finite "
                                                     "value (N ", x.n, ", D ", x.d, ", loss ",
                                                     x.loss, ")"));
    }
    ns.insert(x.n);
    ds.insert(x.d);
  }
  if (ns.size() < 2 || ds.size() < 2) {
    return absl::InvalidArgumentError(
        "degenerate data: the points need at least two distinct N and two distinct D");
  }
  // Every combination of the grid, in a fixed order.
  const auto grid = Law::StartGrid();
  std::vector<std::array<double, kP>> starts(1);
  for (int i = 0; i < kP; ++i) {
    std::vector<std::array<double, kP>> next;
    for (const auto& s : starts) {
      for (double v : grid[i]) {
        auto t = s;
        t[i] = v;
        next.push_back(t);
      }
    }
    starts.swap(next);
  }

  FitResult best;
  best.objective = std::numeric_limits<double>::infinity();
  std::mutex mu;
  std::atomic<size_t> next_start{0};
  auto work = [&] {
    for (size_t i = next_start++; i < starts.size(); i = next_start++) {
      std::array<double, kP> p = starts[i];
      ceres::Problem problem;
      for (const LawPoint& x : points) {
        problem.AddResidualBlock(
            new ceres::AutoDiffCostFunction<Residual<Law>, 1, kP>(new Residual<Law>(x)),
            new ceres::HuberLoss(options.huber_delta), p.data());
      }
      const auto bounds = Law::Bounds();
      for (int k = 0; k < kP; ++k) {
        if (std::isfinite(bounds[k].first)) problem.SetParameterLowerBound(p.data(), k, bounds[k].first);
        if (std::isfinite(bounds[k].second)) problem.SetParameterUpperBound(p.data(), k, bounds[k].second);
      }
      ceres::Solver::Options solver;
      solver.linear_solver_type = ceres::DENSE_QR;
      solver.max_num_iterations = 100;
      solver.function_tolerance = 1e-10;
      solver.gradient_tolerance = 1e-12;
      solver.parameter_tolerance = 1e-10;
      solver.logging_type = ceres::SILENT;
      ceres::Solver::Summary summary;
      ceres::Solve(solver, &problem, &summary);
      double rmse = 0.0;
      const double objective = Objective<Law>(p.data(), points, options.huber_delta, &rmse);
      if (!std::isfinite(objective)) continue;
      std::lock_guard<std::mutex> lock(mu);
      // Ties go to the earlier start, so the result does not depend on threads.
      if (objective < best.objective ||
          (objective == best.objective && i < static_cast<size_t>(best.starts))) {
        best.objective = objective;
        best.rmse = rmse;
        best.raw.assign(p.begin(), p.end());
        best.converged = summary.termination_type == ceres::CONVERGENCE;
        best.starts = static_cast<int>(i);  // the winning start, until replaced below
      }
    }
  };
  const int threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (best.raw.empty()) return absl::InternalError("no start of the grid gave a finite fit");
  best.law = Law::Name();
  best.params = Law::Report(best.raw.data());
  best.n_points = static_cast<int>(points.size());
  best.starts = static_cast<int>(starts.size());
  return best;
}

}  // namespace

absl::StatusOr<FitResult> FitDenseLaw(const std::vector<LawPoint>& points,
                                      const FitOptions& options) {
  return Fit<DenseLaw>(points, options);
}

}  // namespace xmod
