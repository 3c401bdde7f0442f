// Scaling laws as data. A law is a struct with
//
//   static constexpr int kParameters;                 // internal parameters, fitted
//   static const char* Name();
//   static std::vector<std::string> ParameterNames();  // kParameters names
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
// LogLoss is templated on the scalar type so that Ceres differentiates it. Adding a
// law is a new header (dense_law.h, xmod_law.h, moe_law.h so far) plus its entry in
// analysis.cc's law table; the fitter (fitter.h) does not change. docs/laws.md defines the forms.
#ifndef XMOD_ORCHESTRATOR_FIT_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_LAW_H_

#include <cmath>
#include <string>
#include <vector>

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
  std::string scale;  // the sweep's scale name ("" when unknown), used for hold-out
  std::string id;     // job id when the point came from a database
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
  bool dense() const { return (stride <= 1.0 || capacity >= 1.0) && expansion <= 1.0; }
  // Whether a law can predict this run: positive, finite sizes and loss, and for a
  // depth-routed run a context T >= 1, a capacity > 0 and N_total >= N_active; for a
  // MoE run an expansion >= 1 and N_total >= N_active.
  bool Valid() const {
    if (!(n > 0 && d > 0 && loss > 0 && NTotal() > 0) || !std::isfinite(n * d * loss * NTotal())) {
      return false;
    }
    if (!(expansion >= 1.0) || !std::isfinite(expansion)) return false;
    if (expansion > 1.0) return NTotal() >= n;  // a MoE run: no depth routing to check
    return dense() || (context >= 1.0 && capacity > 0.0 && NTotal() >= n);
  }
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
