// The dense law, Chinchilla's approach 3 (Hoffmann et al. 2022):
//   L(N, D) = E + A/N^alpha + B/D^beta,
// fitted in the log-sum-exp parametrisation
//   log L = LSE(a − alpha·log N, b − beta·log D, e),  E = e^e, A = e^a, B = e^b.
#ifndef XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_

#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct DenseLaw {
  static constexpr int kParameters = 5;  // a, b, e, alpha, beta
  static const char* Name() { return "dense"; }
  static std::vector<std::string> ParameterNames() { return {"a", "b", "e", "alpha", "beta"}; }
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
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_DENSE_LAW_H_
