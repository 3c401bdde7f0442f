// Scaling laws as data: a law names its fitted parameters, their bounds, the grid
// of starting points the fitter tries, and a prediction of log-loss templated on the scalar
// type (so Ceres differentiates it). Adding a law is a new file; the fitter
// (fitter.h) does not change. DESIGN.md §1 ("The laws") defines the forms.
#ifndef XMOD_ORCHESTRATOR_FIT_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_LAW_H_

#include <ceres/ceres.h>

#include <cmath>
#include <limits>
#include <utility>
#include <map>
#include <string>
#include <vector>

namespace xmod {

// One observed run. Dense laws read n and d; other laws read the named extras.
struct LawPoint {
  double n = 0.0;     // parameters (N, or N_active for sparse runs)
  double d = 0.0;     // training tokens
  double loss = 0.0;  // final validation loss (nats)
};

// log-sum-exp of three terms, stable for any magnitudes.
template <typename T>
T LogSumExp3(const T& x, const T& y, const T& z) {
  using std::exp;
  using std::log;
  using std::max;
  const T m = max(x, max(y, z));
  return m + log(exp(x - m) + exp(y - m) + exp(z - m));
}

// Chinchilla approach 3: L(N, D) = E + A/N^alpha + B/D^beta, fitted in the
// log-sum-exp parametrisation log L = LSE(a − alpha·log N, b − beta·log D, e)
// with E = exp(e), A = exp(a), B = exp(b).
struct DenseLaw {
  static constexpr int kParameters = 5;  // a, b, e, alpha, beta
  static const char* Name() { return "dense"; }
  static std::vector<std::string> ParameterNames() { return {"a", "b", "e", "alpha", "beta"}; }
  // Epoch AI's grid for the Chinchilla refit: 6 x 6 x 6 x 5 x 5 = 5,400 starts.
  static std::vector<std::vector<double>> StartGrid() {
    return {{0, 5, 10, 15, 20, 25}, {0, 5, 10, 15, 20, 25}, {-1, -0.5, 0, 0.5, 1, 1.5},
            {0, 0.5, 1, 1.5, 2}, {0, 0.5, 1, 1.5, 2}};
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
  // The reported parameters: E, A, B, alpha, beta.
  static std::map<std::string, double> Report(const double* p) {
    return {{"E", std::exp(p[2])}, {"A", std::exp(p[0])}, {"B", std::exp(p[1])},
            {"alpha", p[3]}, {"beta", p[4]}};
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_LAW_H_
