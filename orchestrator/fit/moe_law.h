// The MoE law: the joint law of Ludziejewski et al. 2025 ("Joint MoE Scaling Laws:
// Mixture of Experts Can Be Memory Efficient", ICML 2025, arXiv:2502.05172),
//   L(N, D, Ê) = A·Ê^delta·N^−(alpha − gamma·ln Ê) + B·Ê^omega·D^−(beta − zeta·ln Ê) + E,
// with N the active non-embedding parameters, D the training tokens and Ê the
// expansion E/k (routed expert parameters in total over those a token uses). At
// Ê = 1 every extra vanishes and the law is the dense law, so the dense runs of a
// sweep fit the first five parameters and the MoE runs the four extras; docs/laws.md
// gives the reading of the paper this takes (signs, Ê) and its published numbers.
// Fitted in the log-sum-exp parametrisation:
//   log L = LSE(a + delta·ln Ê − (alpha − gamma·ln Ê)·ln N,
//               b + omega·ln Ê − (beta − zeta·ln Ê)·ln D,  e).
// The first five parameters are the dense law's, in its order, so a dense fit can be
// frozen into them (and a point may carry the dense law of its context instead).
#ifndef XMOD_ORCHESTRATOR_FIT_MOE_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_MOE_LAW_H_

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "orchestrator/fit/dense_law.h"

namespace xmod {

struct MoeLaw : LawDefaults {
  static constexpr int kParameters = 9;
  static constexpr int kDenseParameters = DenseLaw::kParameters;
  static constexpr bool kTwoStage = true;
  static const char* Name() { return "moe"; }
  static const char* Label() { return "MoE"; }
  static std::vector<std::string> ParameterNames() {
    return {"a", "b", "e", "alpha", "beta", "delta", "gamma", "omega", "zeta"};
  }
  static std::vector<std::string> ReportedNames() {
    return {"A", "B", "E", "alpha", "beta", "delta", "gamma", "omega", "zeta"};
  }
  static bool LogScaled(int k) { return k <= 2; }
  // The dense runs and the MoE runs (expansion E/k > 1).
  static std::vector<std::string> Families() { return {"dense", "moe"}; }
  static bool Reads(const LawPoint& x) { return x.dense() || x.expansion > 1.0; }
  // By default only for a sweep of the moe family: a MoE baseline or two beside
  // another family cannot identify the four extras.
  static bool Applies(const SweepFamilies& families) { return families.blocks.count("moe") > 0; }
  static std::vector<std::string> CsvColumns() { return {"N_active", "D", "expansion", "loss"}; }
  static absl::Status CheckCsvRow(const LawPoint& x) {
    if (x.expansion >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "expansion: must be at least 1 (E / top_k; 1 for a dense run)");
  }
  static std::vector<std::string> HoldoutColumns() { return {"expansion"}; }
  static const char* RunsName() { return "MoE"; }
  static const char* NoDenseHint() {
    return "; add baselines: [dense] to the sweep, or a sparsity 0 point";
  }
  // The dense law's grid, then 3^4 = 81 starts for the extras (the two-stage fit
  // freezes the dense parameters, so it tries the 81). The published values sit
  // inside the box the grid spans (docs/laws.md).
  static std::vector<std::vector<double>> StartGrid() {
    std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
    grid.push_back({-0.5, 0.0, 0.5});    // delta
    grid.push_back({-0.02, 0.0, 0.02});  // gamma
    grid.push_back({-0.5, 0.0, 0.5});    // omega
    grid.push_back({-0.02, 0.0, 0.02});  // zeta
    return grid;
  }
  // Finite boxes for the extras, wide against the published magnitudes (|delta|,
  // |omega| < 1, |gamma|, |zeta| < 0.03), so a flat direction stays bounded and a
  // fit that leans on a wall is flagged.
  static std::vector<std::pair<double, double>> Bounds() {
    std::vector<std::pair<double, double>> bounds = DenseLaw::Bounds();
    bounds.push_back({-5.0, 5.0});  // delta
    bounds.push_back({-0.5, 0.5});  // gamma
    bounds.push_back({-5.0, 5.0});  // omega
    bounds.push_back({-0.5, 0.5});  // zeta
    return bounds;
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    const double log_n = std::log(x.n), log_d = std::log(x.d);
    const double log_e = std::log(x.expansion);  // 0 for a dense run: the dense law
    if (x.has_reference) {                       // the dense law of the point's context, frozen
      const double* q = x.reference;
      return LogSumExp3(T(q[0]) + p[5] * log_e - (T(q[3]) - p[6] * log_e) * log_n,
                        T(q[1]) + p[7] * log_e - (T(q[4]) - p[8] * log_e) * log_d, T(q[2]));
    }
    return LogSumExp3(p[0] + p[5] * log_e - (p[3] - p[6] * log_e) * log_n,
                      p[1] + p[7] * log_e - (p[4] - p[8] * log_e) * log_d, p[2]);
  }
  static std::map<std::string, double> Report(const double* p) {
    std::map<std::string, double> r = DenseLaw::Report(p);
    r["delta"] = p[5];
    r["gamma"] = p[6];
    r["omega"] = p[7];
    r["zeta"] = p[8];
    return r;
  }
  static std::vector<double> Inputs(const LawPoint& x) { return {x.n, x.d, x.expansion}; }
  // delta and omega at the MoE runs' geometric-mean N₀ and D₀: the N term's
  // Ê-dependence is Ê^(delta + gamma·ln N), so delta(N₀) = delta + gamma·ln N₀ (and
  // omega(D₀) = omega + zeta·ln D₀) is what the runs pin down; delta and gamma
  // themselves trade along a ridge set by the uncentred ln N.
  static std::vector<std::pair<std::string, double>> Derived(const double* p,
                                                             const std::vector<LawPoint>& points) {
    double log_n = 0.0, log_d = 0.0;
    int count = 0;
    for (const LawPoint& x : points) {
      if (x.expansion <= 1.0) continue;
      log_n += std::log(x.n);
      log_d += std::log(x.d);
      ++count;
    }
    if (count == 0) return {};
    log_n /= count;
    log_d /= count;
    return {{absl::StrFormat("delta[N0=%.3g]", std::exp(log_n)), p[5] + p[6] * log_n},
            {absl::StrFormat("omega[D0=%.3g]", std::exp(log_d)), p[7] + p[8] * log_d}};
  }
  static const char* DerivedNote() {
    return "delta and omega at the MoE runs' geometric-mean N0 and D0 (delta + gamma ln N0, "
           "omega + zeta ln D0)";
  }
  // What the four extras need from the MoE runs: the N term's pair (delta, gamma)
  // needs two N at Ê > 1 and the D term's pair two D. One Ê > 1 is enough, since
  // the dense runs (Ê = 1) fix the law where ln Ê = 0.
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<double> ns, ds;
    for (const LawPoint& x : points) {
      if (x.expansion <= 1.0) continue;
      ns.insert(x.n);
      ds.insert(x.d);
    }
    if (ns.empty()) {
      return absl::InvalidArgumentError(
          "degenerate data: the moe law needs MoE runs (expansion E/k > 1); none were given");
    }
    if (ns.size() < 2 || ds.size() < 2) {
      return absl::InvalidArgumentError(
          "degenerate data: the moe law's extras need MoE runs (E/k > 1) at two or more active "
          "sizes N and two or more token budgets D");
    }
    return absl::OkStatus();
  }
  // What the four extras need of a sweep's planned MoE runs: runs with E/k > 1 at
  // two or more active sizes and token budgets, more distinct (N, D, E/k) than
  // extras, and one granularity (the law has no granularity term).
  static void CheckDesign(const std::vector<LawPoint>& planned, DesignSink* sink) {
    std::set<std::tuple<double, double, double>> inputs;
    std::set<double> ns, ds, expansions, granularities;
    for (const LawPoint& x : planned) {
      if (x.family != "moe") continue;
      const auto g = x.extra.find("granularity");
      granularities.insert(g == x.extra.end() ? 0.0 : g->second);
      if (x.expansion <= 1.0) continue;  // all experts active: a dense point of the law
      inputs.insert({x.n, x.d, x.expansion});
      ns.insert(x.n);
      ds.insert(x.d);
      expansions.insert(x.expansion);
    }
    if (inputs.empty()) {
      sink->Error("grid",
                  "design.laws names moe but the sweep has no MoE job with more experts than "
                  "top_k (sparsity > 0)");
      return;
    }
    if (ns.size() < 2 || ds.size() < 2) {
      sink->Error("grid", absl::StrCat("the MoE law's extras need MoE runs at two or more "
                                       "active sizes and two or more token budgets; these have ",
                                       ns.size(), " and ", ds.size()));
    }
    if (inputs.size() < 5) {
      sink->Error("grid", absl::StrCat("the MoE law's 4 extras see ", inputs.size(),
                                       " distinct MoE runs (N, D, E/k); give at least 5"));
    }
    if (expansions.size() < 2) {
      sink->Warn("grid.sparsity",
                 "one expansion E/k above 1: the law's dependence on the expert count rests on "
                 "that one value and the dense runs");
    }
    if (granularities.size() > 1) {
      sink->Warn("grid.granularity",
                 "several granularities: the MoE law has no granularity term; xmod fit --law "
                 "moe fits one at a time (--granularity G)");
    }
    sink->Note(absl::StrCat("the MoE extras: ", inputs.size(), " distinct MoE runs, ", ns.size(),
                            " active sizes, ", expansions.size(), " expansions E/k"));
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_MOE_LAW_H_
