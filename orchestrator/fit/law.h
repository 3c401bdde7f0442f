// Scaling laws as data. A law is a struct deriving from LawDefaults with
//
//   static constexpr int kParameters;                 // internal parameters, fitted
//   static const char* Name();                        // --law NAME, design.laws, fits.law
//   static const char* Label();                       // for reports and plots ("X-MoD")
//   static std::vector<std::string> ParameterNames();  // kParameters internal names
//   static std::vector<std::string> ReportedNames();   // kParameters published names
//   static std::vector<std::vector<double>> StartGrid();  // values per parameter;
//                                                     // the fitter tries every combination
//   static std::vector<std::pair<double, double>> Bounds();  // ±inf where unbounded
//   template <typename T> static T LogLoss(const T* p, const LawPoint& x);
//                                                     // predicted log-loss; NaN where the
//                                                     // parameters give no positive loss
//   static std::map<std::string, double> Report(const double* p);  // the published names
//   static absl::Status CheckPoints(const std::vector<LawPoint>& points);  // degenerate data
//   static std::vector<double> Inputs(const LawPoint& x);  // what LogLoss reads of x; points
//                                                     // with equal inputs count once
//                                                     // against the parameters
//
// and, where LawDefaults' choice does not fit, what the rest of xmod asks of it:
// which runs it reads, which sweeps it applies to, its CSV columns, whether it is
// fitted in two stages against the dense law, and what a sweep's design needs for
// it (law_registry.h lists them). LogLoss is templated on the scalar type so that
// Ceres differentiates it. Adding a law is a new header plus one row in
// law_registry.cc's table; the fitter (fitter.h), the analysis, the CSV reader, the
// design check, the reports, the plots and the dashboard iterate the table.
// docs/laws.md defines the forms; docs/architecture.md walks through adding one.
#ifndef XMOD_ORCHESTRATOR_FIT_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_LAW_H_

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace xmod {

// One observed run.
struct LawPoint {
  double n = 0.0;         // N for dense runs; N_active (the FLOP-matched dense size) otherwise
  double d = 0.0;         // training tokens
  double loss = 0.0;      // final validation loss (nats)
  double n_total = 0.0;   // non-embedding parameters of the sparse model; 0: same as n
  double context = 0.0;   // T
  double capacity = 1.0;  // ρ the routed layers run at (k / T)
  double stride = 1.0;    // anchor stride s; 1 is a dense model
  double layers = 0.0;    // L of the sparse model; 0: unknown (f_r falls back to (s−1)/s)
  // MoE expansion Ê = E / k: routed expert parameters in total over those a token
  // uses (1 − S with S the expert sparsity); 1 for every model without experts.
  double expansion = 1.0;
  // A Mixture-of-Layers run's block expansion Ê_b = (N − S)/k: its routed thin
  // blocks over those a token uses (1/(1 − σ_b)); 0 for every other run. A MoL run
  // is never the dense model, even at Ê_b = 1.
  double block_expansion = 0.0;
  // A gdn run's share of layers that mix with Gated DeltaNet instead of softmax
  // attention (1: every layer; 0.5: a hybrid with softmax in every second); 0 for
  // every other run. A gdn run is never the dense model.
  double deltanet_share = 0.0;
  // Inputs a law reads that no field above names, by the CSV column they come
  // from (a law declares them in its CsvColumns); absent: the law's default.
  std::map<std::string, double> extra;
  std::string family;  // the sweep family of the run ("" for a CSV row)
  std::string scale;   // the sweep's scale name ("" when unknown), used for hold-out
  std::string id;      // job id when the point came from a database
  // Replicates: points of one configuration (everything but the seed) share
  // `config`; the bootstrap resamples configurations. Empty: the point is its own.
  std::string config;
  // What the bootstrap resamples as one unit when it is wider than `config`: the
  // cooldown branches of one trunk (docs/schedules.md). Empty: `config`.
  std::string cluster;
  double se = 0.0;  // standard error of `loss` from the evaluation (0: unknown)
  // The dense law (a, b, e, alpha, beta) at this point's context, when the X-MoD
  // law compares a sparse run with a dense reference fitted per context.
  bool has_reference = false;
  double reference[5] = {0, 0, 0, 0, 0};

  // Fraction of layers that are routed: (L − ⌈L/s⌉)/L from the real layout.
  double RoutedFraction() const {
    if (layers >= 1.0 && stride > 1.0) {
      const double anchors = std::ceil(layers / stride);
      return (layers - anchors) / layers;
    }
    return stride > 1.0 ? (stride - 1.0) / stride : 0.0;
  }

  double NTotal() const { return n_total > 0 ? n_total : n; }
  // A dense run: every layer sees every token with every MLP weight.
  bool dense() const {
    return (stride <= 1.0 || capacity >= 1.0) && expansion <= 1.0 && block_expansion <= 0.0 &&
           deltanet_share <= 0.0;
  }
  // Whether a law can predict this run: positive, finite sizes and loss, and for a
  // depth-routed run a context T >= 1, a capacity > 0 and N_total >= N_active; for a
  // MoE run an expansion >= 1 and N_total >= N_active.
  bool Valid() const {
    if (!(n > 0 && d > 0 && loss > 0 && NTotal() > 0) || !std::isfinite(n * d * loss * NTotal())) {
      return false;
    }
    if (!(expansion >= 1.0) || !std::isfinite(expansion)) return false;
    if (block_expansion > 0.0) return block_expansion >= 1.0 && NTotal() >= n;  // a MoL run
    if (deltanet_share > 0.0) return deltanet_share <= 1.0;                     // a gdn run
    if (expansion > 1.0) return NTotal() >= n;  // a MoE run: no depth routing to check
    return dense() || (context >= 1.0 && capacity > 0.0 && NTotal() >= n);
  }
};

// The families a sweep's grid blocks name, and those its blocks add as baselines.
struct SweepFamilies {
  std::set<std::string> blocks;
  std::set<std::string> baselines;
  std::set<double> contexts;  // the contexts its grid runs
  bool Has(const std::string& family) const {
    return blocks.count(family) > 0 || baselines.count(family) > 0;
  }
};

// Where a law's design check (LawDefaults::CheckDesign) reports, before any job
// runs: an error or a warning on a field of the sweep file ("grid", "grid.stride",
// "budget", ...; the design check turns the field into a line), or a note.
class DesignSink {
 public:
  virtual ~DesignSink() = default;
  virtual void Error(const std::string& field, const std::string& message) = 0;
  virtual void Warn(const std::string& field, const std::string& message) = 0;
  virtual void Note(const std::string& message) = 0;
};

// What a law says about itself where the common answer fits; a law struct derives
// from this and overrides (hides) what differs.
struct LawDefaults {
  // Two stages: the dense law at each context on the dense runs, then the law's
  // own parameters on its other runs against the dense law of their context.
  static constexpr bool kTwoStage = false;
  // How many leading parameters are the dense law's (a, b, e, alpha, beta): 5 for
  // the dense law and the laws built on it, whose designs need a dense law at
  // every context they span; 0 for a law with nothing of the dense law in it.
  static constexpr int kDenseParameters = 0;
  // One fit over every context of its points (a law with a context term), not
  // one per context.
  static constexpr bool kAcrossContexts = false;
  // Whether reported parameter k is exp(internal) (A, B, E), for --fix.
  static bool LogScaled(int /*k*/) { return false; }
  // The sweep families whose succeeded runs become its points ...
  static std::vector<std::string> Families() { return {}; }
  // ... and which of those points it fits.
  static bool Reads(const LawPoint& /*x*/) { return true; }
  // Whether `xmod run` and the design check fit it by default for a sweep.
  static bool Applies(const SweepFamilies& /*families*/) { return false; }
  // CSV columns it needs besides N (or N_active), D and loss, and those it reads
  // when present. A column no LawPoint field names lands in LawPoint::extra.
  static std::vector<std::string> CsvColumns() { return {}; }
  static std::vector<std::string> CsvOptional() { return {}; }
  // A CSV row's check beyond the common ones (positive N, D, loss; ...).
  static absl::Status CheckCsvRow(const LawPoint& /*x*/) { return absl::OkStatus(); }
  // The inputs a hold-out table shows besides N, N_total, D and T.
  static std::vector<std::string> HoldoutColumns() { return {}; }
  // What its second stage's runs are called in messages ("sparse", "MoE").
  static const char* RunsName() { return "sparse"; }
  // A hint for a sweep with no dense run to anchor the first stage ("" none).
  static const char* NoDenseHint() { return ""; }
  // What a sweep's planned runs (points without a loss, with family, N, N_total,
  // D, T, capacity, stride, expansion) need for the law's own parameters; the
  // dense law's part is checked per context by the design check itself.
  static void CheckDesign(const std::vector<LawPoint>& /*planned*/, DesignSink* /*sink*/) {}
  // Quantities of the fitted parameters that are identifiable where the raw ones
  // are not (a correction at a design point, an exponent at a reference size), by
  // name, at internal parameters `p`; `points` are the fitted runs (the full fit's,
  // also for a bootstrap refit, so that design points and references stay fixed).
  // The report gives each with the bootstrap's interval.
  static std::vector<std::pair<std::string, double>> Derived(
      const double* /*p*/, const std::vector<LawPoint>& /*points*/) {
    return {};
  }
  // One line on what Derived's numbers are ("" none).
  static const char* DerivedNote() { return ""; }
};

// A dense run with N parameters, D tokens and final loss `loss`.
inline LawPoint DensePoint(double n, double d, double loss) {
  LawPoint x;
  x.n = n;
  x.d = d;
  x.loss = loss;
  return x;
}

// Every combination of `grid` (one list of values per coordinate), the last
// coordinate varying fastest.
inline std::vector<std::vector<double>> GridProduct(const std::vector<std::vector<double>>& grid) {
  std::vector<std::vector<double>> out(1);
  for (const std::vector<double>& values : grid) {
    std::vector<std::vector<double>> next;
    next.reserve(out.size() * values.size());
    for (const auto& prefix : out) {
      for (double v : values) {
        next.push_back(prefix);
        next.back().push_back(v);
      }
    }
    out.swap(next);
  }
  return out;
}

// log-sum-exp of three terms, stable for any magnitudes.
template <typename T>
T LogSumExp3(const T& x, const T& y, const T& z) {
  using std::exp;
  using std::log;
  using std::max;
  const T m = max(x, max(y, z));
  return m + log(exp(x - m) + exp(y - m) + exp(z - m));
}

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_LAW_H_
