// The dense law, Chinchilla's approach 3 (Hoffmann et al. 2022):
//   L(N, D) = E + A/N^alpha + B/D^beta,
// fitted in the log-sum-exp parametrisation
//   log L = LSE(a − alpha·log N, b − beta·log D, e),  E = e^e, A = e^a, B = e^b.
#ifndef XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct DenseLaw : LawDefaults {
  static constexpr int kParameters = 5;  // a, b, e, alpha, beta
  static constexpr int kDenseParameters = 5;
  static const char* Name() { return "dense"; }
  static const char* Label() { return "dense"; }
  static std::vector<std::string> ParameterNames() { return {"a", "b", "e", "alpha", "beta"}; }
  static std::vector<std::string> ReportedNames() { return {"A", "B", "E", "alpha", "beta"}; }
  static bool LogScaled(int k) { return k <= 2; }
  // Dense runs of the dense family, and X-MoD runs that route nothing (capacity 1
  // or stride 1), which are the dense model.
  static std::vector<std::string> Families() { return {"dense", "xmod"}; }
  static bool Reads(const LawPoint& x) { return x.dense(); }
  static bool Applies(const SweepFamilies& /*families*/) { return true; }
  static std::vector<std::string> CsvColumns() { return {"N", "D", "loss"}; }
  // Epoch AI's grid for the Chinchilla refit: 6 x 6 x 6 x 5 x 5 = 5,400 starts.
  static std::vector<std::vector<double>> StartGrid() {
    return {{0, 5, 10, 15, 20, 25},
            {0, 5, 10, 15, 20, 25},
            {-1, -0.5, 0, 0.5, 1, 1.5},
            {0, 0.5, 1, 1.5, 2},
            {0, 0.5, 1, 1.5, 2}};
  }
  // Exponents stay non-negative: a negative one turns a decaying term into a
  // growing one and lets a fit chase noise (no bound on a, b, e).
  static std::vector<std::pair<double, double>> Bounds() {
    const double inf = std::numeric_limits<double>::infinity();
    return {{-inf, inf}, {-inf, inf}, {-inf, inf}, {0.0, 10.0}, {0.0, 10.0}};
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::log;
    return LogSumExp3(p[0] - p[3] * log(x.n), p[1] - p[4] * log(x.d), p[2]);
  }
  static std::map<std::string, double> Report(const double* p) {
    return {{"E", std::exp(p[2])},
            {"A", std::exp(p[0])},
            {"B", std::exp(p[1])},
            {"alpha", p[3]},
            {"beta", p[4]}};
  }
  static std::vector<double> Inputs(const LawPoint& x) { return {x.n, x.d}; }
  // With one N (or one D) the A (B) term and E cannot be told apart.
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<double> ns, ds;
    for (const LawPoint& x : points) {
      ns.insert(x.n);
      ds.insert(x.d);
    }
    if (ns.size() < 2 || ds.size() < 2) {
      return absl::InvalidArgumentError(
          "degenerate data: the dense law needs at least two distinct N (model scales) and "
          "two distinct D (token budgets)");
    }
    return absl::OkStatus();
  }
  // The dense law at context `context` of a sweep's planned runs (those of the
  // dense family): three or more scales, more distinct (N, D) than its five
  // parameters, D not a power of N, three budgets at most scales. Every law
  // built on the dense law (kDenseParameters = 5) needs this at each context.
  static void CheckDesignAt(const std::vector<LawPoint>& planned, double context,
                            DesignSink* sink) {
    std::set<std::pair<double, double>> inputs;
    std::map<double, std::set<double>> budgets;  // N -> distinct D
    for (const LawPoint& x : planned) {
      if (x.family != "dense" || x.context != context) continue;
      inputs.insert({x.n, x.d});
      budgets[x.n].insert(x.d);
    }
    const std::string t = absl::StrCat(static_cast<int64_t>(context));
    const std::string where = absl::StrCat("the dense law at T = ", t);
    if (inputs.empty()) {
      sink->Error("grid", absl::StrCat("sparse (X-MoD or MoE) runs at T = ", t,
                                       " but no dense run there: each sparse run is compared "
                                       "with the dense law at its own context (add dense jobs "
                                       "at T = ",
                                       t, ")"));
      return;
    }
    bool ok = true;
    if (budgets.size() < 3) {
      sink->Error("grid.scale", absl::StrCat(where, " sees ", budgets.size(),
                                             " model size(s); it needs at least 3 scales to "
                                             "separate A/N^alpha from E"));
      ok = false;
    }
    if (inputs.size() < 6) {
      sink->Error("budget", absl::StrCat(where, " has ", inputs.size(),
                                         " distinct (N, D) for its 5 parameters; it needs at "
                                         "least 6 (more scales or budgets)"));
      ok = false;
    }
    if (inputs.size() >= 2 && budgets.size() >= 2) {
      double slope = 0.0;
      if (PowerOfN(inputs, &slope)) {
        sink->Error("budget",
                    absl::StrFormat("%s: every dense run has D proportional to N^%.2f, so "
                                    "A/N^alpha and B/D^beta are inseparable at any number of "
                                    "scales; give at least 3 budgets per scale (e.g. "
                                    "tokens_per_param: [5, 20, 80]) or an isoFLOP design "
                                    "(budget: flops: [C1, C2, C3])",
                                    where, slope));
        ok = false;
      }
    }
    int three = 0;
    std::vector<std::string> short_scales;
    for (const auto& [n, ds] : budgets) {
      if (ds.size() >= 3) {
        ++three;
      } else {
        short_scales.push_back(
            absl::StrFormat("N=%.3g (%d budget%s)", n, ds.size(), ds.size() == 1 ? "" : "s"));
      }
    }
    if (ok && 2 * three < static_cast<int>(budgets.size())) {
      sink->Error("budget", absl::StrCat(where, ": only ", three, " of ", budgets.size(),
                                         " scales have 3 or more token budgets; beta rests on "
                                         "too few D per scale"));
      ok = false;
    } else if (!short_scales.empty()) {
      std::string list;
      for (const std::string& s : short_scales) absl::StrAppend(&list, list.empty() ? "" : ", ", s);
      sink->Warn("budget", absl::StrCat(where, ": fewer than 3 budgets at ", list));
    }
    if (ok) {
      double lo = INFINITY, hi = 0.0;
      for (const auto& [n, d] : inputs) {
        lo = std::min(lo, d / n);
        hi = std::max(hi, d / n);
      }
      sink->Note(
          absl::StrFormat("%s: %d scales, %d distinct (N, D), D/N from %.3g to %.3g: "
                          "identifiable",
                          where, budgets.size(), inputs.size(), lo, hi));
    }
  }

  // Whether log D is affine in log N over `inputs` (within 1%): one tokens-per-
  // parameter value or one FLOP budget at every scale, so alpha and beta cannot be
  // told apart. The fitted slope goes to `slope`.
  static bool PowerOfN(const std::set<std::pair<double, double>>& inputs, double* slope) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double m = static_cast<double>(inputs.size());
    for (const auto& [n, d] : inputs) {
      const double x = std::log(n), y = std::log(d);
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    *slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
    const double intercept = (sy - *slope * sx) / m;
    double worst = 0.0;
    for (const auto& [n, d] : inputs) {
      worst = std::max(worst, std::abs(std::log(d) - intercept - *slope * std::log(n)));
    }
    return worst < 0.01;
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_
