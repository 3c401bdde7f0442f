// A law that lives in the tests only, to show that a law is its header and one
// registry row: the loss of a model of N parameters trained for R epochs over its
// data (a CSV column `epochs` that no LawPoint field names),
//   L(N, R) = E + A · N^−alpha · R^rho,
// fitted as log L = LSE(a − alpha·log N + rho·log R, e). Single stage, read from a
// CSV file only (no sweep family produces it).
#ifndef XMOD_TESTS_PLUGINS_REPEAT_LAW_H_
#define XMOD_TESTS_PLUGINS_REPEAT_LAW_H_

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "orchestrator/fit/law.h"

namespace xmod::testing {

struct RepeatLaw : LawDefaults {
  static constexpr int kParameters = 4;  // a, e, alpha, rho
  static const char* Name() { return "repeat"; }
  static const char* Label() { return "repeated data"; }
  static std::vector<std::string> ParameterNames() { return {"a", "e", "alpha", "rho"}; }
  static std::vector<std::string> ReportedNames() { return {"A", "E", "alpha", "rho"}; }
  static bool LogScaled(int k) { return k <= 1; }
  static std::vector<std::string> CsvColumns() { return {"N", "D", "epochs", "loss"}; }
  static std::vector<std::string> HoldoutColumns() { return {"epochs"}; }
  static absl::Status CheckCsvRow(const LawPoint& x) {
    const auto r = x.extra.find("epochs");
    if (r != x.extra.end() && r->second >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError("epochs: must be at least 1");
  }
  static std::vector<std::vector<double>> StartGrid() {
    return {{0, 5, 10}, {-1, 0, 1}, {0, 0.5, 1}, {-0.5, 0, 0.5}};
  }
  static std::vector<std::pair<double, double>> Bounds() {
    const double inf = std::numeric_limits<double>::infinity();
    return {{-inf, inf}, {-inf, inf}, {0.0, 5.0}, {-2.0, 2.0}};
  }
  static double Epochs(const LawPoint& x) { return x.extra.at("epochs"); }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::exp;
    using std::log;
    using std::max;
    const T u = p[0] - p[2] * std::log(x.n) + p[3] * std::log(Epochs(x));
    const T m = max(u, p[1]);
    return m + log(exp(u - m) + exp(p[1] - m));
  }
  static std::map<std::string, double> Report(const double* p) {
    return {{"A", std::exp(p[0])}, {"E", std::exp(p[1])}, {"alpha", p[2]}, {"rho", p[3]}};
  }
  static std::vector<double> Inputs(const LawPoint& x) { return {x.n, Epochs(x)}; }
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<double> ns, rs;
    for (const LawPoint& x : points) {
      ns.insert(x.n);
      rs.insert(Epochs(x));
    }
    if (ns.size() < 2 || rs.size() < 2) {
      return absl::InvalidArgumentError(
          "degenerate data: the repeat law needs two or more N and two or more epoch counts");
    }
    return absl::OkStatus();
  }
};

}  // namespace xmod::testing

#endif  // XMOD_TESTS_PLUGINS_REPEAT_LAW_H_
