// Fitting a named law the way a sweep needs it: which points each law reads, the
// two-stage (or joint) X-MoD fit, percentile bootstrap intervals, and the hold-out
// of the largest scale. The CLI (`xmod fit`, `xmod plot`) and the tests use this.
#ifndef XMOD_ORCHESTRATOR_FIT_ANALYSIS_H_
#define XMOD_ORCHESTRATOR_FIT_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/fitter.h"
#include "orchestrator/fit/lack_of_fit.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct AnalysisOptions {
  std::string law = "dense";  // "dense", "xmod" or "moe"
  bool joint = false;         // xmod, moe: refine every parameter together after the two stages
                              // (one context only: the dense reference is then one law)
  // Frozen parameters by their reported names (E, A, B, alpha, beta; xmod: eta,
  // c_T, beta_T, c_s, psi; moe: delta, gamma, omega, zeta), in reported units (E,
  // A, B as losses, not logs).
  std::map<std::string, double> fixed;
  int bootstrap = 0;         // resamples for percentile intervals (0: none)
  uint64_t seed = 0;         // of the resampling
  double confidence = 0.95;  // interval coverage
  bool holdout_largest = false;
  int exclude_top_loss = 0;  // drop the K highest-loss points the law reads
  FitOptions fit;
};

struct Interval {
  double low = 0.0;
  double high = 0.0;
};

struct HoldoutPoint {
  LawPoint point;
  double predicted = 0.0;  // loss, nats
};

// The dense law fitted at one context (the dense reference of the X-MoD law).
struct ContextFit {
  double context = 0.0;  // T; 0 for points without a context (e.g. a CSV with no T)
  FitResult fit;
  std::map<std::string, Interval> intervals;
  std::vector<std::string> on_bound;  // reported parameters that sit on a bound
};

// How noisy the fitted losses are, next to which a law's errors are read.
struct NoiseSummary {
  int configurations = 0;  // distinct configurations among the fitted points
  int replicated = 0;      // of them, with two or more seeds
  double seed_sd = 0.0;    // median over replicated configurations of sd/mean (relative)
  int with_se = 0;         // points whose evaluation standard error is known
  double eval_se = 0.0;    // median of se/loss over those points (relative)
};

// One bootstrap refit, kept whole so that a decision can be re-made on each
// (the probability that a configuration is best over the refits): its reported
// and internal parameters, and the internal dense parameters per context.
struct BootstrapRefit {
  std::map<std::string, double> params;
  std::vector<double> raw;
  std::vector<std::pair<double, std::vector<double>>> dense_raw;  // (context, raw)
};

// An information criterion on the log-loss, for choosing between forms fitted
// to the same points (docs/laws.md, "Competing forms"): with seed replicates,
// the residuals are read against the replicates' pure-error variance σ²,
//   AIC = Σ r² / σ² + 2k;
// without them, the Gaussian profile form AIC = n · ln(Σ r² / n) + 2k. r: log-loss
// residuals of the fitted points, k: free parameters. Lower is better; only
// differences between forms on the same points mean anything.
struct InformationCriterion {
  bool available = false;
  double aic = 0.0;
  int parameters = 0;
  int points = 0;
  double sigma = 0.0;  // the noise sd of the log-loss it reads the residuals against
  std::string noise;   // "replicates" or "residuals"
};

struct LawReport {
  std::string law;  // "dense", "xmod" or "moe"
  // "single", "per-context", "two-stage", "joint" or "across-contexts" (one fit
  // of a law with a context term over every context; `dense` is then empty)
  std::string method;
  // The final parameters; objective and rmse over every fitted point. With a dense
  // reference per context, the dense part of `fit` is the first context's; the
  // other contexts are in `dense` (use Predict, not the raw vector, to predict).
  FitResult fit;
  // The dense law per context (the dense law's result, or the X-MoD law's stage 1).
  std::vector<ContextFit> dense;
  // xmod, moe: the dense law on the dense runs (first context), then the extras on
  // the sparse (xmod) or MoE (moe) runs.
  std::vector<FitResult> stages;
  std::vector<LawPoint> points;               // the points fitted (hold-out excluded)
  std::map<std::string, Interval> intervals;  // per reported parameter (extras for xmod)
  std::vector<std::string> on_bound;          // reported parameters on a bound
  std::vector<std::string> fixed;             // reported parameters frozen by --fix
  int bootstrap_used = 0;                     // resamples that gave a fit
  int bootstrap_failed = 0;                   // resamples that were degenerate or did not fit
  std::string bootstrap_failure;       // the commonest reason a resample failed, with its count
  int bootstrap_clusters = 0;          // configurations resampled (replicates move together)
  std::vector<BootstrapRefit> refits;  // the resamples that fitted, in resample order
  NoiseSummary noise;
  // Whether the fitted form is rejected by the scatter of its seed replicates
  // (lack_of_fit.h), on the fitted points with the fitted parameters.
  LackOfFit lack_of_fit;
  InformationCriterion information;
  // Identifiable quantities of the parameters (LawSpec::derived), in the law's
  // order, with the bootstrap's intervals.
  std::vector<std::pair<std::string, double>> derived;
  std::map<std::string, Interval> derived_intervals;
  std::string holdout_scale;
  std::vector<HoldoutPoint> holdout;
  double holdout_rmse = 0.0;  // of log-loss over the held-out points
  double seconds = 0.0;

  // The fitted law's loss (nats) at `x`, with the dense reference of x's context.
  absl::StatusOr<double> Predict(const LawPoint& x) const;
};

// Laws FitNamedLaw knows.
std::vector<std::string> KnownLaws();

// Fits `options.law` to `points`. The dense law reads the dense points only
// (stride 1 or capacity 1, expansion 1); the xmod law the dense and depth-routed
// ones, the moe law the dense and MoE (expansion > 1) ones. INVALID_ARGUMENT for an
// unknown law, too few points, degenerate data, or a hold-out that leaves too little.
absl::StatusOr<LawReport> FitNamedLaw(const std::vector<LawPoint>& points,
                                      const AnalysisOptions& options);

// The law's predicted loss (nats) at `x` for internal parameters `raw`.
absl::StatusOr<double> PredictLoss(const std::string& law, const std::vector<double>& raw,
                                   const LawPoint& x);

// Groups points into scales: by name where every point has one, otherwise points
// whose N is within 25% of the group's smallest N. Returns one label per point and
// the label of the largest scale (by mean log N).
std::vector<std::string> ScaleLabels(const std::vector<LawPoint>& points, std::string* largest);

// A stable hash (16 hex digits) of the fitted points, independent of their order.
std::string PointsHash(const std::vector<LawPoint>& points);

// ReadChinchillaReference and ReadLawCsv: orchestrator/fit/law_csv.h.

// `law`, `method`, `params`, `objective`, `rmse`, `n_points`, `converged`, `starts`,
// `seconds`, and where present `stages`, `intervals` and `holdout` (docs/laws.md).
nlohmann::json ReportJson(const LawReport& report);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_ANALYSIS_H_
