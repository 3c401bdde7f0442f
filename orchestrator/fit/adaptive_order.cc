#include "orchestrator/fit/adaptive_order.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "Eigen/Dense"
#include "absl/strings/str_cat.h"
#include "ceres/jet.h"
#include "common/status_macros.h"
#include "orchestrator/fit/dense_law.h"

namespace xmod {
namespace {

constexpr int kP = DenseLaw::kParameters;
using Vec = Eigen::Matrix<double, kP, 1>;
using Mat = Eigen::Matrix<double, kP, kP>;

// d log L / d p at x for the internal parameters p.
Vec Gradient(const std::vector<double>& p, const LawPoint& x) {
  using Jet = ceres::Jet<double, kP>;
  Jet q[kP];
  for (int k = 0; k < kP; ++k) q[k] = Jet(p[k], k);
  const Jet y = DenseLaw::LogLoss(q, x);
  return y.v;
}

// Distinct values up to a relative 1e-9 (sizes and token counts are exact in
// practice; replicates repeat them).
size_t Distinct(const std::vector<LawPoint>& points, double LawPoint::*field) {
  std::set<long long> seen;
  for (const LawPoint& x : points) seen.insert(std::llround(std::log(x.*field) * 1e9));
  return seen.size();
}

std::vector<std::string> CheapestFirst(const std::vector<OrderCandidate>& candidates) {
  std::vector<const OrderCandidate*> sorted;
  for (const OrderCandidate& c : candidates) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(), [](const OrderCandidate* a, const OrderCandidate* b) {
    return a->cost != b->cost ? a->cost < b->cost : a->id < b->id;
  });
  std::vector<std::string> ids;
  for (const OrderCandidate* c : sorted) ids.push_back(c->id);
  return ids;
}

}  // namespace

std::vector<std::vector<double>> CoarseDenseStarts() {
  std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
  for (std::vector<double>& values : grid) {
    std::vector<double> every_other;
    for (size_t i = 0; i < values.size(); i += 2) every_other.push_back(values[i]);
    values = every_other;
  }
  return GridProduct(grid);
}

absl::StatusOr<AdaptiveOrder> OrderByExpectedGain(const std::vector<LawPoint>& points,
                                                  const std::vector<OrderCandidate>& candidates,
                                                  const LawPoint& target,
                                                  const AdaptiveOrderOptions& options) {
  if (!(target.n > 0 && target.d > 0 && std::isfinite(target.n * target.d))) {
    return absl::InvalidArgumentError(
        absl::StrCat("adaptive order: the target needs a positive N and D (got N ", target.n,
                     ", D ", target.d, ")"));
  }
  for (const OrderCandidate& c : candidates) {
    if (!(c.cost > 0 && std::isfinite(c.cost) && c.x.n > 0 && c.x.d > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("adaptive order: candidate ", c.id,
                                                     " has cost ", c.cost, ", N ", c.x.n, ", D ",
                                                     c.x.d, " (all must be positive)"));
    }
  }
  AdaptiveOrder out;
  const size_t ns = Distinct(points, &LawPoint::n), ds = Distinct(points, &LawPoint::d);
  if (points.size() < kP + 1 || ns < 3 || ds < 3) {
    out.why = absl::StrCat("too few points to steer by: ", points.size(), " point(s), ", ns,
                           " distinct N, ", ds, " distinct D (needs 6, 3 and 3)");
    out.order = CheapestFirst(candidates);
    return out;
  }
  FitSetup setup;
  if (!options.warm.empty()) {
    setup.starts = options.warm;
    for (std::vector<double>& s : CoarseDenseStarts()) setup.starts.push_back(std::move(s));
  }
  absl::StatusOr<FitResult> fit = FitLaw<DenseLaw>(points, options.fit, setup);
  if (!fit.ok()) {
    out.why = absl::StrCat("the dense law did not fit: ", fit.status().message());
    out.order = CheapestFirst(candidates);
    return out;
  }
  out.adaptive = true;
  out.fit = *std::move(fit);

  // The information matrix of the points (unit noise), a tiny ridge for the flat
  // directions a log-sum-exp law has, and its inverse: the parameter covariance
  // over σ².
  Mat info = Mat::Zero();
  for (const LawPoint& x : points) {
    const Vec j = Gradient(out.fit.raw, x);
    info += j * j.transpose();
  }
  info += Mat::Identity() * (1e-10 * info.trace() / kP + 1e-300);
  Mat cov = info.ldlt().solve(Mat::Identity());
  const Vec g = Gradient(out.fit.raw, target);
  double variance = g.dot(cov * g);
  out.target_sd_over_sigma = std::sqrt(std::max(0.0, variance));

  std::vector<Vec> grads;
  grads.reserve(candidates.size());
  for (const OrderCandidate& c : candidates) grads.push_back(Gradient(out.fit.raw, c.x));
  std::vector<bool> taken(candidates.size(), false);
  for (size_t round = 0; round < candidates.size(); ++round) {
    // Sherman–Morrison: adding a point with gradient j removes (gᵀCj)² / (1 + jᵀCj)
    // from the target's variance (in σ² units).
    size_t best = candidates.size();
    double best_score = -1.0, best_removed = 0.0;
    Vec best_u;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (taken[i]) continue;
      const Vec u = cov * grads[i];
      const double q = g.dot(u);
      const double removed = q * q / (1.0 + grads[i].dot(u));
      const double worth = options.criterion == OrderCriterion::kExpectedGain
                               ? removed
                               : std::sqrt(std::max(0.0, grads[i].dot(u)));
      const double score = worth / candidates[i].cost;
      const bool better = best == candidates.size() || score > best_score ||
                          (score == best_score && (candidates[i].cost < candidates[best].cost ||
                                                   (candidates[i].cost == candidates[best].cost &&
                                                    candidates[i].id < candidates[best].id)));
      if (better) {
        best = i;
        best_score = score;
        best_removed = removed;
        best_u = u;
      }
    }
    taken[best] = true;
    out.order.push_back(candidates[best].id);
    out.gain.push_back(variance > 0 ? std::clamp(best_removed / variance, 0.0, 1.0) : 0.0);
    variance = std::max(0.0, variance - best_removed);
    cov -= best_u * best_u.transpose() / (1.0 + grads[best].dot(best_u));
  }
  return out;
}

absl::StatusOr<OrderTrace> SimulateOrder(const std::vector<OrderCandidate>& jobs,
                                         const std::vector<double>& observed, SimulatedOrder rule,
                                         const LawPoint& target, double true_target,
                                         const FitOptions& fit) {
  if (observed.size() != jobs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SimulateOrder: ", jobs.size(), " jobs but ", observed.size(), " losses"));
  }
  OrderTrace trace;
  std::vector<size_t> pending(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) pending[i] = i;
  std::vector<LawPoint> points;
  AdaptiveOrderOptions options;
  options.fit = fit;
  options.criterion =
      rule == SimulatedOrder::kWidth ? OrderCriterion::kWidth : OrderCriterion::kExpectedGain;
  options.warm = {{0.0, 0.0, 0.0, 0.5, 0.5}};  // beside the coarse grid; then the last optima
  std::string next;  // the law's pick for the next round ("" : cheapest-first)
  double spent = 0.0;
  while (!pending.empty()) {
    auto pick = std::min_element(pending.begin(), pending.end(), [&](size_t a, size_t b) {
      return jobs[a].cost != jobs[b].cost ? jobs[a].cost < jobs[b].cost : jobs[a].id < jobs[b].id;
    });
    if (rule != SimulatedOrder::kCheapestFirst && !next.empty()) {
      pick = std::find_if(pending.begin(), pending.end(),
                          [&](size_t i) { return jobs[i].id == next; });
    }
    const size_t i = *pick;
    pending.erase(pick);
    LawPoint x = jobs[i].x;
    x.loss = observed[i];
    points.push_back(x);
    spent += jobs[i].cost;
    trace.order.push_back(jobs[i].id);
    trace.flops.push_back(spent);
    std::vector<OrderCandidate> rest;
    for (size_t k : pending) rest.push_back(jobs[k]);
    ASSIGN_OR_RETURN(AdaptiveOrder order, OrderByExpectedGain(points, rest, target, options));
    next.clear();
    if (!order.adaptive) {
      trace.error.push_back(1.0);
      continue;
    }
    trace.error.push_back(
        std::abs(std::exp(DenseLaw::LogLoss(order.fit.raw.data(), target)) / true_target - 1.0));
    options.warm = order.fit.optima;
    if (!order.order.empty()) next = order.order.front();
  }
  return trace;
}

std::vector<OrderCandidate> SyntheticDenseGrid() {
  std::vector<OrderCandidate> jobs;
  for (double n : {2e6, 4e6, 8e6, 16e6, 32e6}) {
    for (double r : {5.0, 10.0, 20.0, 40.0, 80.0}) {
      OrderCandidate c;
      c.id = absl::StrCat("N", n / 1e6, "M-r", r);
      c.x = DensePoint(n, r * n, 0.0);
      c.cost = 6.0 * n * r * n;
      jobs.push_back(c);
    }
  }
  return jobs;
}

std::vector<double> ChinchillaLaw() {
  return {std::log(406.4), std::log(410.7), std::log(1.69), 0.34, 0.28};
}

double FlopsToReach(const OrderTrace& trace, double tolerance) {
  double reach = std::numeric_limits<double>::infinity();
  for (size_t i = trace.error.size(); i-- > 0;) {
    if (!(trace.error[i] <= tolerance)) break;
    reach = trace.flops[i];
  }
  return reach;
}

}  // namespace xmod
