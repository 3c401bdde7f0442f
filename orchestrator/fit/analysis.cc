#include "orchestrator/fit/analysis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/moe_law.h"
#include "orchestrator/fit/xmod_law.h"

namespace xmod {

namespace {

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

// What analysis.cc needs to know of each law besides its header: the reported
// name of each internal parameter (the dense law's first five are shared) and
// its bounds. A reported A, B or E is the exponential of the internal a, b, e.
struct LawTable {
  std::string name;
  std::vector<std::string> reported;
  std::vector<std::pair<double, double>> bounds;
  bool two_stage = false;  // the dense law first, then the extras with it frozen
};

const std::vector<LawTable>& Laws() {
  static const std::vector<LawTable>* const laws = [] {
    const std::vector<std::string> dense = {"A", "B", "E", "alpha", "beta"};
    auto with = [&](std::vector<std::string> extras) {
      std::vector<std::string> all = dense;
      all.insert(all.end(), extras.begin(), extras.end());
      return all;
    };
    return new std::vector<LawTable>{
        {DenseLaw::Name(), dense, DenseLaw::Bounds(), false},
        {XModLaw::Name(), with({"eta", "c_T", "beta_T", "c_s", "psi"}), XModLaw::Bounds(), true},
        {MoeLaw::Name(), with({"delta", "gamma", "omega", "zeta"}), MoeLaw::Bounds(), true}};
  }();
  return *laws;
}

const LawTable* FindLaw(const std::string& name) {
  for (const LawTable& law : Laws()) {
    if (law.name == name) return &law;
  }
  return nullptr;
}

bool LogScaled(int k) { return k <= 2; }

// --fix, resolved to internal parameters of `law`.
absl::StatusOr<std::vector<std::optional<double>>> ResolveFixed(
    const std::map<std::string, double>& fixed, const LawTable& law) {
  const int count = static_cast<int>(law.reported.size());
  std::vector<std::optional<double>> out(count);
  for (const auto& [name, value] : fixed) {
    int index = -1;
    for (int k = 0; k < count; ++k) {
      if (name == law.reported[k]) index = k;
    }
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fix ", name, ": law ", law.name, " has no parameter '", name,
                       "' (known: ", absl::StrJoin(law.reported, ", "), ")"));
    }
    if (!std::isfinite(value) || (LogScaled(index) && !(value > 0))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fix ", name, "=", value, ": ",
                       LogScaled(index) ? "must be positive" : "must be finite"));
    }
    const double raw = LogScaled(index) ? std::log(value) : value;
    if (raw < law.bounds[index].first || raw > law.bounds[index].second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fix ", name, "=", value, ": outside the law's bounds [",
                       law.bounds[index].first, ", ", law.bounds[index].second, "]"));
    }
    out[index] = raw;
  }
  return out;
}

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

// Reported parameters of `raw` that sit on a bound of `law` (frozen ones excluded).
std::vector<std::string> OnBound(const std::vector<double>& raw, const LawTable& law,
                                 const std::vector<std::optional<double>>& fixed) {
  const std::vector<std::pair<double, double>>& bounds = law.bounds;
  std::vector<std::string> out;
  for (size_t k = 0; k < raw.size() && k < bounds.size(); ++k) {
    if (k < fixed.size() && fixed[k].has_value()) continue;
    for (double b : {bounds[k].first, bounds[k].second}) {
      if (std::isfinite(b) && std::abs(raw[k] - b) <= 1e-6 * (1.0 + std::abs(b))) {
        out.push_back(law.reported[k]);
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

// How one law is fitted to one point set; `previous` (when given) is the full-data
// fit: a bootstrap refit starts from its optima and from the thinned grid.
struct Fitted {
  std::vector<ContextFit> dense;
  FitResult extras;
  FitResult fit;
  std::string method;
};

struct Fixed {
  std::vector<std::optional<double>> all;    // the law's parameters
  std::vector<std::optional<double>> dense;  // the first five
};

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

// The dense law at each context of the dense points.
absl::Status FitDensePerContext(const std::vector<LawPoint>& dense, const Fixed& fixed,
                                const FitOptions& options, const Fitted* previous,
                                const std::string& what, Fitted* out) {
  const std::vector<double> contexts = Contexts(dense);
  if (previous != nullptr && previous->dense.size() != contexts.size()) {
    return absl::InvalidArgumentError("a resample lost a context");
  }
  for (size_t i = 0; i < contexts.size(); ++i) {
    std::vector<LawPoint> at;
    for (const LawPoint& x : dense) {
      if (x.context == contexts[i]) at.push_back(x);
    }
    ContextFit c;
    c.context = contexts[i];
    absl::StatusOr<FitResult> r =
        FitLaw<DenseLaw>(at, options,
                         Starts(fixed.dense, previous ? &previous->dense[i].fit : nullptr,
                                DenseLaw::StartGrid(), 0, DenseLaw::kParameters, {}));
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat(what,
                                       contexts.size() > 1 || contexts[i] > 0
                                           ? absl::StrCat("dense law at T = ", contexts[i])
                                           : std::string("dense law"),
                                       " (", at.size(), " dense runs): ", r.status().message()));
    }
    c.fit = *std::move(r);
    c.on_bound = OnBound(c.fit.raw, *FindLaw(DenseLaw::Name()), fixed.dense);
    for (std::string& v : VanishedDenseTerms(c.fit.raw, at, fixed.dense)) c.on_bound.push_back(v);
    out->dense.push_back(std::move(c));
  }
  return absl::OkStatus();
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

absl::StatusOr<Fitted> FitDense(const std::vector<LawPoint>& points, const Fixed& fixed,
                                const FitOptions& options, const Fitted* previous) {
  Fitted out;
  RETURN_IF_ERROR(FitDensePerContext(Runs(points, true), fixed, options, previous, "", &out));
  out.method = out.dense.size() > 1 ? "per-context" : "single";
  out.fit = out.dense[0].fit;
  std::vector<const FitResult*> parts;
  for (const ContextFit& c : out.dense) parts.push_back(&c.fit);
  Combine(parts, &out.fit);
  out.fit.starts = 0;
  for (const ContextFit& c : out.dense) out.fit.starts += c.fit.starts;
  out.fit.converged = std::all_of(out.dense.begin(), out.dense.end(),
                                  [](const ContextFit& c) { return c.fit.converged; });
  return out;
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

// A law whose first five parameters are the dense law's (xmod, moe), fitted in two
// stages: the dense law at each context on the dense runs, then the law's extras on
// the other runs, each against the dense law of its context (frozen). With `joint`,
// all parameters are then refined together (one context only).
template <typename Law>
absl::StatusOr<Fitted> FitTwoStage(const std::vector<LawPoint>& points, bool joint,
                                   const Fixed& fixed, const FitOptions& options,
                                   const Fitted* previous) {
  constexpr int kP = Law::kParameters, kDense = Law::kDenseParameters;
  const std::string name = Law::Name();
  const std::vector<LawPoint> dense = Runs(points, true);
  const std::vector<LawPoint> sparse = Runs(points, false);
  Fitted out;
  out.method = joint ? "joint" : "two-stage";
  // Stage 1: the dense law at each context.
  if (dense.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " law, stage 1: no dense runs (the dense reference needs them",
        name == "moe" ? "; add baselines: [dense] to the sweep, or a sparsity 0 point" : "", ")"));
  }
  RETURN_IF_ERROR(FitDensePerContext(dense, fixed, options, previous,
                                     absl::StrCat(name, " law, stage 1, "), &out));
  if (joint && out.dense.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--joint: the dense reference is fitted per context and these runs span ", out.dense.size(),
        " contexts; a joint fit shares one dense law (select one with --context T)"));
  }
  // Stage 2: the extras on the sparse runs, each against its context's dense law.
  absl::StatusOr<std::vector<LawPoint>> referenced = WithReferences(sparse, out.dense, name);
  if (!referenced.ok()) return referenced.status();
  const std::vector<double>& first = out.dense[0].fit.raw;
  std::vector<std::optional<double>> fixed2 = fixed.all;
  fixed2.resize(kP);
  for (int k = 0; k < kDense; ++k) fixed2[k] = first[k];
  FitSetup setup2 = Starts(fixed2, previous ? &previous->extras : nullptr, Law::StartGrid(), kDense,
                           kP - kDense, first);
  absl::StatusOr<FitResult> stage2 = FitLaw<Law>(*referenced, options, setup2);
  if (!stage2.ok()) {
    return absl::Status(stage2.status().code(),
                        absl::StrCat(name, " law, stage 2 (extras on the ", sparse.size(),
                                     name == "moe" ? " MoE runs): " : " sparse runs): ",
                                     stage2.status().message()));
  }
  out.extras = *stage2;
  FitResult all = *stage2;
  std::vector<const FitResult*> parts;
  for (const ContextFit& c : out.dense) parts.push_back(&c.fit);
  parts.push_back(&*stage2);
  Combine(parts, &all);
  all.starts = stage2->starts;
  all.converged = stage2->converged;
  for (const ContextFit& c : out.dense) {
    all.starts += c.fit.starts;
    all.converged = all.converged && c.fit.converged;
  }
  if (joint) {
    // Every parameter together (one context), from the two-stage optimum and from
    // the dense optimum with each extras start of the grid.
    std::vector<LawPoint> both = dense;
    both.insert(both.end(), sparse.begin(), sparse.end());
    FitSetup setup;
    setup.fixed = fixed.all;
    setup.starts.push_back(stage2->raw);
    if (previous != nullptr) {
      for (const auto& o : previous->fit.optima) setup.starts.push_back(o);
    } else {
      const auto grid = Law::StartGrid();
      for (const auto& e : GridProduct({grid.begin() + kDense, grid.end()})) {
        std::vector<double> s(first.begin(), first.end());
        s.insert(s.end(), e.begin(), e.end());
        setup.starts.push_back(s);
      }
    }
    const int before = all.starts;
    ASSIGN_OR_RETURN(all, FitLaw<Law>(both, options, setup));
    all.starts += before;
  }
  out.fit = std::move(all);
  return out;
}

absl::StatusOr<Fitted> FitOnce(const std::vector<LawPoint>& points, const AnalysisOptions& options,
                               const Fixed& fixed, const FitOptions& fit_options,
                               const Fitted* previous) {
  if (options.law == DenseLaw::Name()) return FitDense(points, fixed, fit_options, previous);
  if (options.law == MoeLaw::Name()) {
    return FitTwoStage<MoeLaw>(points, options.joint, fixed, fit_options, previous);
  }
  return FitTwoStage<XModLaw>(points, options.joint, fixed, fit_options, previous);
}

double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (at - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

// Points grouped by `config` (the replicates of one configuration), or with
// `resampled` by what the bootstrap draws (`cluster`, else `config`: the cooldown
// branches of one trunk move together); a point without either is its own group.
std::vector<std::vector<LawPoint>> Clusters(const std::vector<LawPoint>& points,
                                            bool resampled = false) {
  std::map<std::string, size_t> index;
  std::vector<std::vector<LawPoint>> out;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string& named =
        resampled && !points[i].cluster.empty() ? points[i].cluster : points[i].config;
    const std::string key = named.empty() ? absl::StrCat("#", i) : named;
    auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) out.emplace_back();
    out[it->second].push_back(points[i]);
  }
  return out;
}

// The strata a resample draws from separately: dense and sparse runs, each by
// context, so every resample keeps both kinds at every context (the dense
// reference is fitted per context).
std::vector<std::vector<std::vector<LawPoint>>> Strata(const std::vector<LawPoint>& points) {
  std::map<std::pair<bool, double>, std::vector<LawPoint>> by;
  for (const LawPoint& x : points) by[{x.dense(), x.context}].push_back(x);
  std::vector<std::vector<std::vector<LawPoint>>> out;
  for (const auto& [key, part] : by) out.push_back(Clusters(part, /*resampled=*/true));
  return out;
}

// A resample with replacement of the configurations of each stratum.
std::vector<LawPoint> Resample(const std::vector<std::vector<std::vector<LawPoint>>>& strata,
                               std::mt19937_64* rng) {
  std::vector<LawPoint> out;
  for (const auto& stratum : strata) {
    const auto* part = &stratum;
    if (part->empty()) continue;
    // Plain modulo rather than std::uniform_int_distribution, whose algorithm
    // differs between standard libraries: the same seed gives the same intervals
    // everywhere (the bias is below 2^-40 for any realistic count).
    for (size_t i = 0; i < part->size(); ++i) {
      const auto& cluster = (*part)[(*rng)() % part->size()];
      out.insert(out.end(), cluster.begin(), cluster.end());
    }
  }
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

NoiseSummary Noise(const std::vector<LawPoint>& points) {
  NoiseSummary n;
  std::vector<double> sds, ses;
  for (const auto& cluster : Clusters(points)) {
    ++n.configurations;
    if (cluster.size() < 2) continue;
    ++n.replicated;
    double mean = 0, squares = 0;
    for (const LawPoint& x : cluster) mean += x.loss;
    mean /= static_cast<double>(cluster.size());
    for (const LawPoint& x : cluster) squares += (x.loss - mean) * (x.loss - mean);
    sds.push_back(std::sqrt(squares / static_cast<double>(cluster.size() - 1)) / mean);
  }
  for (const LawPoint& x : points) {
    if (x.se > 0) ses.push_back(x.se / x.loss);
  }
  n.seed_sd = Median(sds);
  n.with_se = static_cast<int>(ses.size());
  n.eval_se = Median(ses);
  return n;
}

}  // namespace

absl::StatusOr<double> LawReport::Predict(const LawPoint& x) const {
  if (law == "dense" || x.dense()) {
    if (law != "dense" && method == "joint") return PredictLoss(law, fit.raw, x);
    const ContextFit* c = AtContext(dense, x.context);
    if (c == nullptr) {
      return absl::NotFoundError(absl::StrCat("no dense law was fitted at T = ", x.context));
    }
    return std::exp(DenseLaw::LogLoss(c->fit.raw.data(), x));
  }
  if (method == "joint") return PredictLoss(law, fit.raw, x);
  ASSIGN_OR_RETURN(std::vector<LawPoint> one, WithReferences({x}, dense, law));
  return PredictLoss(law, fit.raw, one[0]);
}

std::vector<std::string> KnownLaws() {
  std::vector<std::string> names;
  for (const LawTable& law : Laws()) names.push_back(law.name);
  return names;
}

std::vector<std::string> ScaleLabels(const std::vector<LawPoint>& points, std::string* largest) {
  std::vector<std::string> labels(points.size());
  const bool named =
      !points.empty() &&
      std::all_of(points.begin(), points.end(), [](const LawPoint& x) { return !x.scale.empty(); });
  if (named) {
    for (size_t i = 0; i < points.size(); ++i) labels[i] = points[i].scale;
  } else {
    std::vector<size_t> order(points.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return points[a].n < points[b].n; });
    double group_start = 0.0;
    std::string label;
    for (size_t i : order) {
      if (label.empty() || points[i].n > 1.25 * group_start) {
        group_start = points[i].n;
        label = absl::StrFormat("N~%.3g", group_start);
      }
      labels[i] = label;
    }
  }
  std::map<std::string, std::pair<double, int>> log_n;
  for (size_t i = 0; i < points.size(); ++i) {
    log_n[labels[i]].first += std::log(points[i].n);
    log_n[labels[i]].second += 1;
  }
  double best = -std::numeric_limits<double>::infinity();
  for (const auto& [label, sum] : log_n) {
    const double mean = sum.first / sum.second;
    if (mean > best) {
      best = mean;
      if (largest != nullptr) *largest = label;
    }
  }
  return labels;
}

absl::StatusOr<double> PredictLoss(const std::string& law, const std::vector<double>& raw,
                                   const LawPoint& x) {
  if (law == "dense" && raw.size() == DenseLaw::kParameters) {
    return std::exp(DenseLaw::LogLoss(raw.data(), x));
  }
  if (law == "xmod" && raw.size() == XModLaw::kParameters) {
    return std::exp(XModLaw::LogLoss(raw.data(), x));
  }
  if (law == "moe" && raw.size() == MoeLaw::kParameters) {
    return std::exp(MoeLaw::LogLoss(raw.data(), x));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown law '", law, "' (or wrong parameters)"));
}

std::string PointsHash(const std::vector<LawPoint>& points) {
  std::vector<std::string> rows;
  for (const LawPoint& x : points) {
    rows.push_back(absl::StrFormat("%.17g|%.17g|%.17g|%.17g|%.17g|%.17g|%.17g", x.n, x.NTotal(),
                                   x.d, x.context, x.capacity, x.stride, x.loss));
    // A MoE run's expansion; absent at 1, so hashes stored before it existed hold.
    if (x.expansion != 1.0) absl::StrAppend(&rows.back(), absl::StrFormat("|E%.17g", x.expansion));
  }
  std::sort(rows.begin(), rows.end());
  std::string all;
  for (const std::string& r : rows) absl::StrAppend(&all, r, "\n");
  return HexId(all);
}

absl::StatusOr<LawReport> FitNamedLaw(const std::vector<LawPoint>& points,
                                      const AnalysisOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const LawTable* table = FindLaw(options.law);
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--law ", options.law, ": unknown law (known: ", absl::StrJoin(KnownLaws(), ", "), ")"));
  }
  if (options.joint && !table->two_stage) {
    return absl::InvalidArgumentError("--joint: only the xmod and moe laws have stages to join");
  }
  if (options.bootstrap < 0) return absl::InvalidArgumentError("--bootstrap: must be >= 0");
  Fixed fixed;
  ASSIGN_OR_RETURN(fixed.all, ResolveFixed(options.fixed, *table));
  fixed.dense.assign(fixed.all.begin(), fixed.all.begin() + DenseLaw::kParameters);
  if (!(options.confidence > 0 && options.confidence < 1)) {
    return absl::InvalidArgumentError("confidence must be in (0, 1)");
  }
  LawReport report;
  report.law = options.law;
  // Only the points this law reads take part (and count as scales): the dense law
  // reads dense runs, the xmod law dense and depth-routed runs, the moe law dense and
  // MoE runs.
  std::vector<LawPoint> usable;
  for (const LawPoint& x : points) {
    const bool moe = x.expansion > 1.0, depth = !x.dense() && !moe;
    if (x.dense() || (options.law == "xmod" && depth) || (options.law == "moe" && moe)) {
      usable.push_back(x);
    }
  }
  if (usable.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("law ", options.law, ": no usable points (the dense law needs dense runs)"));
  }
  // Every point, held out or not, must be one the law can predict.
  for (const LawPoint& x : usable) {
    if (!x.Valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(x.id.empty() ? "a point" : x.id, ": not a valid run for law ", options.law,
                       " (N ", x.n, ", N_total ", x.NTotal(), ", D ", x.d, ", T ", x.context,
                       ", capacity ", x.capacity, ", loss ", x.loss, ")"));
    }
  }
  if (options.exclude_top_loss < 0 || options.exclude_top_loss >= static_cast<int>(usable.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--exclude-top-loss ", options.exclude_top_loss,
                                                   ": out of range for the ", usable.size(),
                                                   " points law ", options.law, " reads"));
  }
  if (options.exclude_top_loss > 0) {
    std::stable_sort(usable.begin(), usable.end(),
                     [](const LawPoint& a, const LawPoint& b) { return a.loss < b.loss; });
    usable.resize(usable.size() - options.exclude_top_loss);
  }
  // A canonical order, so that the same set of points gives the same fit to the
  // last bit whatever order it came in (sums of residuals depend on the order).
  std::stable_sort(usable.begin(), usable.end(), [](const LawPoint& a, const LawPoint& b) {
    return std::tie(a.n, a.n_total, a.d, a.context, a.capacity, a.stride, a.expansion, a.loss,
                    a.id) < std::tie(b.n, b.n_total, b.d, b.context, b.capacity, b.stride,
                                     b.expansion, b.loss, b.id);
  });
  std::vector<LawPoint> fit_points;
  if (options.holdout_largest) {
    const std::vector<std::string> labels = ScaleLabels(usable, &report.holdout_scale);
    std::set<std::string> distinct(labels.begin(), labels.end());
    if (table->two_stage) {
      // The X-MoD and MoE laws hold out the largest scale that has sparse runs (a
      // sweep may have dense-only scales above it), with its dense runs.
      std::map<std::string, std::pair<double, int>> log_n;
      for (size_t i = 0; i < usable.size(); ++i) {
        if (usable[i].dense()) continue;
        log_n[labels[i]].first += std::log(usable[i].n);
        log_n[labels[i]].second += 1;
      }
      double best = -std::numeric_limits<double>::infinity();
      for (const auto& [label, sum] : log_n) {
        if (sum.first / sum.second > best) {
          best = sum.first / sum.second;
          report.holdout_scale = label;
        }
      }
    }
    if (distinct.size() < 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--holdout-largest: the points span ", distinct.size(),
          " scale(s); holding the largest out needs at least three (two left to fit)"));
    }
    for (size_t i = 0; i < usable.size(); ++i) {
      if (labels[i] == report.holdout_scale) {
        report.holdout.push_back({usable[i], 0.0});
      } else {
        fit_points.push_back(usable[i]);
      }
    }
  } else {
    fit_points = usable;
  }

  report.noise = Noise(usable);
  for (const auto& [name, value] : options.fixed) report.fixed.push_back(name);
  absl::StatusOr<Fitted> full = FitOnce(fit_points, options, fixed, options.fit, nullptr);
  if (!full.ok()) {
    if (!options.holdout_largest) return full.status();
    return absl::Status(full.status().code(),
                        absl::StrCat("fitting without the largest scale (", report.holdout_scale,
                                     "): ", full.status().message()));
  }
  report.method = full->method;
  report.fit = full->fit;
  report.dense = full->dense;
  if (table->two_stage) report.stages = {full->dense[0].fit, full->extras};
  report.points = fit_points;
  if (options.law == "dense") {
    // The flags of each context's fit (a vanished term included), named per
    // context when there are several.
    report.on_bound.clear();
    for (const ContextFit& c : report.dense) {
      for (const std::string& name : c.on_bound) {
        report.on_bound.push_back(report.dense.size() > 1 ? absl::StrCat(name, "@T=", c.context)
                                                          : name);
      }
    }
  } else {
    report.on_bound = OnBound(report.fit.raw, *table, fixed.all);
  }
  if (table->two_stage && report.method != "joint") {
    // The dense parameters' flags are per context; the extras' are the law's own.
    std::vector<std::string> extras;
    for (const std::string& name : report.on_bound) {
      if (std::find(table->reported.begin(), table->reported.begin() + DenseLaw::kParameters,
                    name) == table->reported.begin() + DenseLaw::kParameters) {
        extras.push_back(name);
      }
    }
    for (const ContextFit& c : report.dense) {
      for (const std::string& name : c.on_bound)
        extras.push_back(absl::StrCat(name, "@T=", c.context));
    }
    report.on_bound = extras;
  }

  if (!report.holdout.empty()) {
    double squares = 0.0;
    for (HoldoutPoint& h : report.holdout) {
      absl::StatusOr<double> predicted = report.Predict(h.point);
      if (!predicted.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--holdout-largest: ", predicted.status().message(), " among the fitted scales"));
      }
      h.predicted = *predicted;
      const double r = std::log(h.predicted) - std::log(h.point.loss);
      squares += r * r;
    }
    report.holdout_rmse = std::sqrt(squares / static_cast<double>(report.holdout.size()));
  }

  if (options.bootstrap > 0) {
    // Each resample draws configurations with replacement (replicates move
    // together) and is refitted from the full fit's optima and the thinned grid;
    // resamples run in parallel, each single-threaded with its own seeded
    // generator, so the intervals do not depend on the thread count.
    const auto strata = Strata(fit_points);
    report.bootstrap_clusters = 0;
    for (const auto& stratum : strata)
      report.bootstrap_clusters += static_cast<int>(stratum.size());
    struct Draw {
      std::map<std::string, double> params;
      std::vector<std::map<std::string, double>> dense;
    };
    std::vector<std::optional<Draw>> draws(options.bootstrap);
    std::vector<std::string> reasons(options.bootstrap);
    std::atomic<int> next{0};
    FitOptions one = options.fit;
    one.threads = 1;
    auto work = [&] {
      for (int b = next++; b < options.bootstrap; b = next++) {
        std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(b) + 1);
        const std::vector<LawPoint> sample = Resample(strata, &rng);
        absl::StatusOr<Fitted> refit = FitOnce(sample, options, fixed, one, &*full);
        if (!refit.ok()) {
          reasons[b] = std::string(refit.status().message());
          continue;
        }
        Draw d;
        d.params = refit->fit.params;
        for (const ContextFit& c : refit->dense) d.dense.push_back(c.fit.params);
        draws[b] = std::move(d);
      }
    };
    const int threads = std::max(
        1,
        std::min(options.bootstrap, options.fit.threads > 0
                                        ? options.fit.threads
                                        : static_cast<int>(std::thread::hardware_concurrency())));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
    std::map<std::string, std::vector<double>> values;
    std::vector<std::map<std::string, std::vector<double>>> dense_values(report.dense.size());
    std::map<std::string, int> why;
    for (size_t b = 0; b < draws.size(); ++b) {
      const auto& d = draws[b];
      if (!d.has_value()) {
        ++report.bootstrap_failed;
        ++why[reasons[b]];
        continue;
      }
      ++report.bootstrap_used;
      for (const auto& [name, v] : d->params) values[name].push_back(v);
      for (size_t i = 0; i < d->dense.size() && i < dense_values.size(); ++i) {
        for (const auto& [name, v] : d->dense[i]) dense_values[i][name].push_back(v);
      }
    }
    if (!why.empty()) {
      const auto commonest = std::max_element(
          why.begin(), why.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      report.bootstrap_failure = absl::StrCat(commonest->first, " (", commonest->second, ")");
    }
    if (report.bootstrap_used < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--bootstrap: only ", report.bootstrap_used, " of ", options.bootstrap,
                       " resamples could be fitted; the data are too few for intervals",
                       report.bootstrap_failure.empty()
                           ? ""
                           : absl::StrCat("; commonest failure: ", report.bootstrap_failure)));
    }
    const double tail = (1.0 - options.confidence) / 2.0;
    for (const auto& [name, v] : values) {
      report.intervals[name] = {Quantile(v, tail), Quantile(v, 1.0 - tail)};
    }
    for (size_t i = 0; i < report.dense.size(); ++i) {
      for (const auto& [name, v] : dense_values[i]) {
        report.dense[i].intervals[name] = {Quantile(v, tail), Quantile(v, 1.0 - tail)};
      }
    }
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

nlohmann::json ReportJson(const LawReport& report) {
  nlohmann::json j = {{"law", report.law},
                      {"method", report.method},
                      {"params", report.fit.params},
                      {"objective", report.fit.objective},
                      {"rmse", report.fit.rmse},
                      {"n_points", report.fit.n_points},
                      {"converged", report.fit.converged},
                      {"starts", report.fit.starts},
                      {"seconds", report.seconds}};
  if (!report.stages.empty()) {
    nlohmann::json stages = nlohmann::json::array();
    for (const FitResult& s : report.stages) {
      stages.push_back({{"objective", s.objective},
                        {"rmse", s.rmse},
                        {"n_points", s.n_points},
                        {"starts", s.starts},
                        {"converged", s.converged}});
    }
    j["stages"] = stages;
  }
  auto intervals_json = [](const std::map<std::string, Interval>& in) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, iv] : in) out[name] = {iv.low, iv.high};
    return out;
  };
  if (!report.intervals.empty()) {
    j["intervals"] = intervals_json(report.intervals);
    const int total = report.bootstrap_used + report.bootstrap_failed;
    j["bootstrap"] = {
        {"used", report.bootstrap_used},
        {"failed", report.bootstrap_failed},
        {"commonest_failure", report.bootstrap_failure},
        {"failed_share", total > 0 ? static_cast<double>(report.bootstrap_failed) / total : 0.0},
        {"clusters", report.bootstrap_clusters},
        {"resampling",
         "configurations with replacement (replicates together), "
         "dense and sparse separately"},
        {"starts", "the full fit's optima and every third value of each grid axis"}};
  }
  nlohmann::json dense = nlohmann::json::array();
  for (const ContextFit& c : report.dense) {
    nlohmann::json row = {{"context", c.context},         {"params", c.fit.params},
                          {"objective", c.fit.objective}, {"rmse", c.fit.rmse},
                          {"n_points", c.fit.n_points},   {"converged", c.fit.converged},
                          {"on_bound", c.on_bound}};
    if (!c.intervals.empty()) row["intervals"] = intervals_json(c.intervals);
    dense.push_back(row);
  }
  j["dense"] = dense;
  j["on_bound"] = report.on_bound;
  j["fixed"] = report.fixed;
  j["noise"] = {{"configurations", report.noise.configurations},
                {"replicated", report.noise.replicated},
                {"seed_sd_relative", report.noise.seed_sd},
                {"points_with_se", report.noise.with_se},
                {"eval_se_relative", report.noise.eval_se}};
  // Each fitted point's observed and predicted loss, for predicted-against-observed
  // views of a stored fit (the dashboard's).
  nlohmann::json fitted = nlohmann::json::array();
  for (const LawPoint& p : report.points) {
    absl::StatusOr<double> predicted = report.Predict(p);
    fitted.push_back({{"job_id", p.id},
                      {"observed", p.loss},
                      {"predicted", predicted.ok() ? nlohmann::json(*predicted) : nullptr}});
  }
  j["fitted"] = fitted;
  if (!report.holdout.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const HoldoutPoint& h : report.holdout) {
      rows.push_back({{"job_id", h.point.id},
                      {"N", h.point.n},
                      {"N_total", h.point.NTotal()},
                      {"D", h.point.d},
                      {"context", h.point.context},
                      {"capacity", h.point.capacity},
                      {"stride", h.point.stride},
                      {"expansion", h.point.expansion},
                      {"observed", h.point.loss},
                      {"predicted", h.predicted}});
    }
    j["holdout"] = {
        {"scale", report.holdout_scale}, {"rmse", report.holdout_rmse}, {"points", rows}};
  }
  return j;
}

}  // namespace xmod
