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

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "orchestrator/fit/dense_law.h"
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

// Starts for a refit: the full-data fit's distinct optima.
FitSetup FromOptima(const FitResult& fit) {
  FitSetup setup;
  setup.starts = fit.optima.empty() ? std::vector<std::vector<double>>{fit.raw} : fit.optima;
  return setup;
}

// How one law is fitted to one point set; `previous` (when given) is the full-data
// fit whose optima seed a bootstrap refit instead of the whole grid.
struct Fitted {
  FitResult fit;
  std::vector<FitResult> stages;
  std::string method;
};

absl::StatusOr<Fitted> FitDense(const std::vector<LawPoint>& points, const FitOptions& options,
                                const Fitted* previous) {
  const std::vector<LawPoint> dense = Runs(points, true);
  Fitted out;
  out.method = "single";
  ASSIGN_OR_RETURN(out.fit, FitLaw<DenseLaw>(dense, options,
                                             previous ? FromOptima(previous->fit) : FitSetup{}));
  return out;
}

absl::StatusOr<Fitted> FitXMod(const std::vector<LawPoint>& points, bool joint,
                               const FitOptions& options, const Fitted* previous) {
  const std::vector<LawPoint> dense = Runs(points, true);
  const std::vector<LawPoint> sparse = Runs(points, false);
  std::vector<LawPoint> both = dense;
  both.insert(both.end(), sparse.begin(), sparse.end());
  Fitted out;
  out.method = joint ? "joint" : "two-stage";
  // Stage 1: the dense law on the dense runs.
  absl::StatusOr<FitResult> stage1 =
      FitLaw<DenseLaw>(dense, options, previous ? FromOptima(previous->stages[0]) : FitSetup{});
  if (!stage1.ok()) {
    return absl::Status(stage1.status().code(),
                        absl::StrCat("xmod law, stage 1 (dense law on the ", dense.size(),
                                     " dense runs): ", stage1.status().message()));
  }
  // Stage 2: the five extras on the sparse runs, the dense law frozen.
  FitSetup setup2;
  setup2.fixed.assign(XModLaw::kParameters, std::nullopt);
  for (int k = 0; k < XModLaw::kDenseParameters; ++k) setup2.fixed[k] = stage1->raw[k];
  if (previous != nullptr) setup2.starts = previous->stages[1].optima;
  absl::StatusOr<FitResult> stage2 = FitLaw<XModLaw>(sparse, options, setup2);
  if (!stage2.ok()) {
    return absl::Status(stage2.status().code(),
                        absl::StrCat("xmod law, stage 2 (extras on the ", sparse.size(),
                                     " sparse runs): ", stage2.status().message()));
  }
  out.stages = {*stage1, *stage2};
  FitResult all = *stage2;
  all.n_points = static_cast<int>(dense.size() + sparse.size());
  all.starts = stage1->starts + stage2->starts;
  all.converged = stage1->converged && stage2->converged;
  if (joint) {
    // All ten together, from the two-stage optimum and from the dense optimum
    // with each extras start of the grid.
    FitSetup setup;
    setup.starts.push_back(stage2->raw);
    if (previous != nullptr) {
      // A resample also starts from the full joint fit's optima.
      for (const auto& o : previous->fit.optima) setup.starts.push_back(o);
    } else {
      const auto grid = XModLaw::StartGrid();
      for (const auto& e : GridProduct({grid.begin() + XModLaw::kDenseParameters, grid.end()})) {
        std::vector<double> s(stage1->raw.begin(), stage1->raw.end());
        s.insert(s.end(), e.begin(), e.end());
        setup.starts.push_back(s);
      }
    }
    ASSIGN_OR_RETURN(all, FitLaw<XModLaw>(both, options, setup));
    all.starts += stage1->starts + stage2->starts;
  } else {
    all.objective = LawObjective<XModLaw>(all.raw.data(), both, options.huber_delta, &all.rmse);
  }
  out.fit = std::move(all);
  return out;
}

absl::StatusOr<Fitted> FitOnce(const std::vector<LawPoint>& points,
                               const AnalysisOptions& options, const FitOptions& fit_options,
                               const Fitted* previous) {
  if (options.law == "dense") return FitDense(points, fit_options, previous);
  return FitXMod(points, options.joint, fit_options, previous);
}

double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (at - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

// A resample with replacement of `points`, dense and sparse runs drawn separately
// so every resample keeps both kinds in their proportions.
std::vector<LawPoint> Resample(const std::vector<LawPoint>& points, std::mt19937_64* rng) {
  std::vector<LawPoint> out;
  for (const auto& part : {Runs(points, true), Runs(points, false)}) {
    if (part.empty()) continue;
    // Plain modulo rather than std::uniform_int_distribution, whose algorithm
    // differs between standard libraries: the same seed gives the same intervals
    // everywhere (the bias is below 2^-40 for any realistic point count).
    for (size_t i = 0; i < part.size(); ++i) out.push_back(part[(*rng)() % part.size()]);
  }
  return out;
}

}  // namespace

std::vector<std::string> KnownLaws() { return {"dense", "xmod"}; }

std::vector<std::string> ScaleLabels(const std::vector<LawPoint>& points, std::string* largest) {
  std::vector<std::string> labels(points.size());
  const bool named = !points.empty() && std::all_of(points.begin(), points.end(),
                                                    [](const LawPoint& x) { return !x.scale.empty(); });
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
  return absl::InvalidArgumentError(absl::StrCat("unknown law '", law, "' (or wrong parameters)"));
}

std::string PointsHash(const std::vector<LawPoint>& points) {
  std::vector<std::string> rows;
  for (const LawPoint& x : points) {
    rows.push_back(absl::StrFormat("%.17g|%.17g|%.17g|%.17g|%.17g|%.17g|%.17g", x.n, x.NTotal(),
                                   x.d, x.context, x.capacity, x.stride, x.loss));
  }
  std::sort(rows.begin(), rows.end());
  std::string all;
  for (const std::string& r : rows) absl::StrAppend(&all, r, "\n");
  return HexId(all);
}

absl::StatusOr<LawReport> FitNamedLaw(const std::vector<LawPoint>& points,
                                      const AnalysisOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<std::string> laws = KnownLaws();
  if (std::find(laws.begin(), laws.end(), options.law) == laws.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--law ", options.law, ": unknown law (known: dense, xmod)"));
  }
  if (options.joint && options.law != "xmod") {
    return absl::InvalidArgumentError("--joint: only the xmod law has stages to join");
  }
  if (options.bootstrap < 0) return absl::InvalidArgumentError("--bootstrap: must be >= 0");
  if (!(options.confidence > 0 && options.confidence < 1)) {
    return absl::InvalidArgumentError("confidence must be in (0, 1)");
  }
  LawReport report;
  report.law = options.law;
  // Only the points this law reads take part (and count as scales).
  std::vector<LawPoint> usable = options.law == "dense" ? Runs(points, true) : points;
  if (usable.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("law ", options.law, ": no usable points (the dense law needs dense runs)"));
  }
  // Every point, held out or not, must be one the law can predict.
  for (const LawPoint& x : usable) {
    if (!x.Valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          x.id.empty() ? "a point" : x.id, ": not a valid run for law ", options.law, " (N ", x.n,
          ", N_total ", x.NTotal(), ", D ", x.d, ", T ", x.context, ", capacity ", x.capacity,
          ", loss ", x.loss, ")"));
    }
  }
  if (options.exclude_top_loss < 0 ||
      options.exclude_top_loss >= static_cast<int>(usable.size())) {
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
    return std::tie(a.n, a.n_total, a.d, a.context, a.capacity, a.stride, a.loss, a.id) <
           std::tie(b.n, b.n_total, b.d, b.context, b.capacity, b.stride, b.loss, b.id);
  });
  std::vector<LawPoint> fit_points;
  if (options.holdout_largest) {
    const std::vector<std::string> labels = ScaleLabels(usable, &report.holdout_scale);
    std::set<std::string> distinct(labels.begin(), labels.end());
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

  absl::StatusOr<Fitted> full = FitOnce(fit_points, options, options.fit, nullptr);
  if (!full.ok()) {
    if (!options.holdout_largest) return full.status();
    return absl::Status(full.status().code(),
                        absl::StrCat("fitting without the largest scale (", report.holdout_scale,
                                     "): ", full.status().message()));
  }
  report.method = full->method;
  report.fit = full->fit;
  report.stages = full->stages;
  report.points = fit_points;

  if (!report.holdout.empty()) {
    double squares = 0.0;
    for (HoldoutPoint& h : report.holdout) {
      ASSIGN_OR_RETURN(h.predicted, PredictLoss(options.law, report.fit.raw, h.point));
      const double r = std::log(h.predicted) - std::log(h.point.loss);
      squares += r * r;
    }
    report.holdout_rmse = std::sqrt(squares / static_cast<double>(report.holdout.size()));
  }

  if (options.bootstrap > 0) {
    // Each resample is refitted from the full fit's distinct optima; resamples run
    // in parallel, each single-threaded, each with its own seeded generator, so the
    // intervals do not depend on the thread count.
    std::vector<std::optional<std::map<std::string, double>>> draws(options.bootstrap);
    std::atomic<int> next{0};
    FitOptions one = options.fit;
    one.threads = 1;
    auto work = [&] {
      for (int b = next++; b < options.bootstrap; b = next++) {
        std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(b) + 1);
        const std::vector<LawPoint> sample = Resample(fit_points, &rng);
        absl::StatusOr<Fitted> refit = FitOnce(sample, options, one, &*full);
        if (refit.ok()) draws[b] = refit->fit.params;
      }
    };
    const int threads = std::max(
        1, std::min(options.bootstrap, options.fit.threads > 0
                                           ? options.fit.threads
                                           : static_cast<int>(std::thread::hardware_concurrency())));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
    std::map<std::string, std::vector<double>> values;
    for (const auto& d : draws) {
      if (!d.has_value()) {
        ++report.bootstrap_failed;
        continue;
      }
      ++report.bootstrap_used;
      for (const auto& [name, v] : *d) values[name].push_back(v);
    }
    if (report.bootstrap_used < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--bootstrap: only ", report.bootstrap_used, " of ", options.bootstrap,
          " resamples could be fitted; the data are too few for intervals"));
    }
    const double tail = (1.0 - options.confidence) / 2.0;
    for (const auto& [name, v] : values) {
      report.intervals[name] = {Quantile(v, tail), Quantile(v, 1.0 - tail)};
    }
  }
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

absl::StatusOr<std::vector<LawPoint>> ReadChinchillaReference(const std::string& path,
                                                              int drop_highest) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::string line;
  std::getline(in, line);
  while (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> header = absl::StrSplit(line, ',');
  auto column = [&](const char* name) -> absl::StatusOr<size_t> {
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":1: no column '", name, "'"));
    }
    return static_cast<size_t>(it - header.begin());
  };
  ASSIGN_OR_RETURN(const size_t n_col, column("Model Size"));
  ASSIGN_OR_RETURN(const size_t c_col, column("Training FLOP"));
  ASSIGN_OR_RETURN(const size_t l_col, column("loss"));
  std::vector<LawPoint> points;
  for (int number = 2; std::getline(in, line); ++number) {
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> f = absl::StrSplit(line, ',');
    double values[3] = {0, 0, 0};
    const size_t columns[3] = {n_col, c_col, l_col};
    for (int k = 0; k < 3; ++k) {
      if (columns[k] >= f.size() || !absl::SimpleAtod(f[columns[k]], &values[k]) ||
          !(values[k] > 0) || !std::isfinite(values[k])) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ",
                                                       header[columns[k]],
                                                       ": not a positive number"));
      }
    }
    points.push_back(DensePoint(values[0], values[1] / (6.0 * values[0]), values[2]));
  }
  if (drop_highest < 0 || drop_highest >= static_cast<int>(points.size())) {
    return absl::InvalidArgumentError("drop_highest: out of range");
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const LawPoint& a, const LawPoint& b) { return a.loss < b.loss; });
  points.resize(points.size() - drop_highest);
  return points;
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
  if (!report.intervals.empty()) {
    nlohmann::json intervals = nlohmann::json::object();
    for (const auto& [name, iv] : report.intervals) intervals[name] = {iv.low, iv.high};
    j["intervals"] = intervals;
    j["bootstrap"] = {{"used", report.bootstrap_used}, {"failed", report.bootstrap_failed}};
  }
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
                      {"observed", h.point.loss},
                      {"predicted", h.predicted}});
    }
    j["holdout"] = {{"scale", report.holdout_scale}, {"rmse", report.holdout_rmse}, {"points", rows}};
  }
  return j;
}

}  // namespace xmod
