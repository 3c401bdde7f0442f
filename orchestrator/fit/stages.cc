#include "orchestrator/fit/stages.h"

#include <cmath>
#include <set>

namespace xmod {

namespace {

// Every third value of each axis of a start grid (the first, fourth, ...): the
// stated subset a bootstrap refit searches besides the full fit's optima (32
// starts for the dense law, 2 for the extras), so a resample can leave the full
// fit's basin.
std::vector<std::vector<double>> ThinnedGrid(const std::vector<std::vector<double>>& grid) {
  std::vector<std::vector<double>> out;
  for (const auto& axis : grid) {
    std::vector<double> kept;
    for (size_t i = 0; i < axis.size(); i += 3) kept.push_back(axis[i]);
    out.push_back(kept);
  }
  return GridProduct(out);
}

}  // namespace

// The dense runs of `points` (dense = true) or the sparse ones.
std::vector<LawPoint> Runs(const std::vector<LawPoint>& points, bool dense) {
  std::vector<LawPoint> out;
  for (const LawPoint& x : points) {
    if (x.dense() == dense) out.push_back(x);
  }
  return out;
}

// Distinct contexts of `points`, ascending.
std::vector<double> Contexts(const std::vector<LawPoint>& points) {
  std::set<double> c;
  for (const LawPoint& x : points) c.insert(x.context);
  return {c.begin(), c.end()};
}

FitSetup Starts(const std::vector<std::optional<double>>& fixed, const FitResult* previous,
                const std::vector<std::vector<double>>& grid, size_t first, size_t count,
                const std::vector<double>& prefix) {
  FitSetup setup;
  setup.fixed = fixed;
  if (previous == nullptr) return setup;  // the law's whole grid
  setup.starts =
      previous->optima.empty() ? std::vector<std::vector<double>>{previous->raw} : previous->optima;
  const std::vector<std::vector<double>> axes(grid.begin() + first, grid.begin() + first + count);
  for (const std::vector<double>& g : ThinnedGrid(axes)) {
    std::vector<double> start = prefix;
    start.insert(start.end(), g.begin(), g.end());
    setup.starts.push_back(start);
  }
  return setup;
}

// Reported parameters of `raw` that sit on a bound (frozen ones excluded).
std::vector<std::string> OnBound(const std::vector<double>& raw,
                                 const std::vector<std::string>& names,
                                 const std::vector<std::pair<double, double>>& bounds,
                                 const std::vector<std::optional<double>>& fixed) {
  std::vector<std::string> out;
  for (size_t k = 0; k < raw.size() && k < bounds.size(); ++k) {
    if (k < fixed.size() && fixed[k].has_value()) continue;
    for (double b : {bounds[k].first, bounds[k].second}) {
      if (std::isfinite(b) && std::abs(raw[k] - b) <= 1e-6 * (1.0 + std::abs(b))) {
        out.push_back(names[k]);
        break;
      }
    }
  }
  return out;
}

// The dense law's unbounded parameters have a limit of their own: a term of the
// log-sum-exp whose share of the predicted loss is below 0.1% at every point has
// gone to zero (E -> 0 when the losses are far from any floor). Such a parameter
// is not estimated any more than one on a bound; it is reported as "E->0" etc.
std::vector<std::string> VanishedDenseTerms(const std::vector<double>& raw,
                                            const std::vector<LawPoint>& points,
                                            const std::vector<std::optional<double>>& fixed) {
  if (raw.size() < DenseLaw::kParameters || points.empty()) return {};
  // Terms of log L: a - alpha log N (A), b - beta log D (B), e (E).
  const char* names[] = {"A", "B", "E"};
  std::vector<std::string> out;
  for (int t = 0; t < 3; ++t) {
    if (static_cast<size_t>(t) < fixed.size() && fixed[t].has_value()) continue;
    double largest = 0.0;
    for (const LawPoint& x : points) {
      const double terms[] = {raw[0] - raw[3] * std::log(x.n), raw[1] - raw[4] * std::log(x.d),
                              raw[2]};
      const double top = std::max({terms[0], terms[1], terms[2]});
      const double total =
          std::exp(terms[0] - top) + std::exp(terms[1] - top) + std::exp(terms[2] - top);
      largest = std::max(largest, std::exp(terms[t] - top) / total);
    }
    if (largest < 1e-3) out.push_back(absl::StrCat(names[t], "->0"));
  }
  return out;
}

// Objective and RMSE of several fits together.
void Combine(const std::vector<const FitResult*>& parts, FitResult* into) {
  double objective = 0, squares = 0;
  int n = 0;
  for (const FitResult* f : parts) {
    objective += f->objective;
    squares += f->rmse * f->rmse * f->n_points;
    n += f->n_points;
  }
  into->objective = objective;
  into->n_points = n;
  into->rmse = n > 0 ? std::sqrt(squares / n) : 0.0;
}

// The dense fit of `context` among `dense`, or null.
const ContextFit* AtContext(const std::vector<ContextFit>& dense, double context) {
  for (const ContextFit& c : dense) {
    if (c.context == context) return &c;
  }
  if (dense.size() == 1 && dense[0].context == 0.0) return &dense[0];  // points without T
  return nullptr;
}

absl::StatusOr<std::vector<LawPoint>> WithReferences(const std::vector<LawPoint>& sparse,
                                                     const std::vector<ContextFit>& dense,
                                                     const std::string& law) {
  std::vector<LawPoint> out = sparse;
  for (LawPoint& x : out) {
    const ContextFit* c = AtContext(dense, x.context);
    if (c == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          law, " law: ", x.id.empty() ? "a sparse run" : x.id, " is at T = ", x.context,
          " but no dense run is; each sparse run is compared with the dense law at its own "
          "context"));
    }
    x.has_reference = true;
    std::copy(c->fit.raw.begin(), c->fit.raw.begin() + DenseLaw::kParameters, x.reference);
  }
  return out;
}

}  // namespace xmod
