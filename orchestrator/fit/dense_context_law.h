// The dense law with a context term, one law across every context the dense runs
// span (docs/laws.md, "A dense law with a context term"):
//   L(N, D, T) = (E + A/N^alpha + B/D^beta) · (T / 1024)^(−kappa),
// in log form log L = LSE(a − alpha·log N, b − beta·log D, e) − kappa·log(T/1024).
// It competes with the per-context reference (the dense law fitted at each T) on
// the information criterion and the held-out error, and is what answers a context
// the sweep did not run (advise --extrapolate): at a fixed T it is a dense law
// whose a, b, e are shifted by −kappa·log(T/1024).
#ifndef XMOD_ORCHESTRATOR_FIT_DENSE_CONTEXT_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_DENSE_CONTEXT_LAW_H_

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct DenseContextLaw : LawDefaults {
  static constexpr int kParameters = 6;  // a, b, e, alpha, beta, kappa
  static constexpr bool kAcrossContexts = true;
  static constexpr double kReferenceContext = 1024.0;  // where E, A, B are read
  static const char* Name() { return "dense-context"; }
  static const char* Label() { return "dense with a context term"; }
  static std::vector<std::string> ParameterNames() {
    return {"a", "b", "e", "alpha", "beta", "kappa"};
  }
  static std::vector<std::string> ReportedNames() {
    return {"A", "B", "E", "alpha", "beta", "kappa"};
  }
  static bool LogScaled(int k) { return k <= 2; }
  static std::vector<std::string> Families() { return DenseLaw::Families(); }
  static bool Reads(const LawPoint& x) { return x.dense(); }
  // Fitted by default when the sweep's dense runs span two or more contexts.
  static bool Applies(const SweepFamilies& families) { return families.contexts.size() >= 2; }
  static std::vector<std::string> CsvColumns() { return {"N", "D", "T", "loss"}; }
  static std::vector<std::vector<double>> StartGrid() {
    std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
    grid.push_back({-0.1, 0.0, 0.1});
    return grid;
  }
  // kappa within ±2: a loss that moves by more than a factor 4 per doubling of T
  // is no context effect.
  static std::vector<std::pair<double, double>> Bounds() {
    std::vector<std::pair<double, double>> b = DenseLaw::Bounds();
    b.emplace_back(-2.0, 2.0);
    return b;
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::log;
    return DenseLaw::LogLoss(p, x) - p[5] * log(x.context / kReferenceContext);
  }
  static std::map<std::string, double> Report(const double* p) {
    std::map<std::string, double> r = DenseLaw::Report(p);
    r["kappa"] = p[5];
    return r;
  }
  static std::vector<double> Inputs(const LawPoint& x) { return {x.n, x.d, x.context}; }
  // kappa needs two contexts; the dense part what the dense law needs.
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<double> contexts;
    for (const LawPoint& x : points) {
      if (!(x.context > 0)) {
        return absl::InvalidArgumentError(
            "the dense-context law needs each run's context T (a CSV needs a T column)");
      }
      contexts.insert(x.context);
    }
    if (contexts.size() < 2) {
      return absl::InvalidArgumentError(
          "degenerate data: the dense-context law needs dense runs at two or more contexts T");
    }
    return DenseLaw::CheckPoints(points);
  }
  // The dense law at context T in the dense law's own parameters (a, b, e,
  // alpha, beta): the context factor moved into a, b and e.
  static std::vector<double> DenseAt(const std::vector<double>& p, double context) {
    const double shift = p[5] * std::log(context / kReferenceContext);
    return {p[0] - shift, p[1] - shift, p[2] - shift, p[3], p[4]};
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_DENSE_CONTEXT_LAW_H_
