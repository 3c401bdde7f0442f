// The Mixture-of-Layers law, xmod's working form relative to the FLOP-matched
// dense law (docs/mol.md, docs/laws.md):
//   L_mol = L_dense,T(N_eff, D) + c_m,     N_eff = N_active · Ê_b^eta,
// with N_active the parameters one token uses (for a FLOP-matched MoL about the
// dense model's N: both spend 2 FLOPs per weight), D the training tokens and
// Ê_b = (N − S)/k the block expansion: the routed thin blocks over those a token
// uses. eta says how much of the unused blocks' capacity acts like parameters (0:
// none, 1: all of it); c_m is what the architecture itself costs or gains at equal
// active FLOPs (thin blocks, linear attention in the routed ones), in nats. At a
// dense run the law is the dense law. Two stages: the dense law at each context on
// the dense runs, then eta and c_m on the MoL runs against the dense law of their
// context. Not from the MoL paper, which fits no law: a form to be rejected by the
// data when it does not fit (the lack-of-fit test and the hold-out say so).
#ifndef XMOD_ORCHESTRATOR_FIT_MOL_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_MOL_LAW_H_

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

struct MolLaw : LawDefaults {
  static constexpr int kParameters = 7;
  static constexpr int kDenseParameters = DenseLaw::kParameters;
  static constexpr bool kTwoStage = true;
  static const char* Name() { return "mol"; }
  static const char* Label() { return "MoL"; }
  static std::vector<std::string> ParameterNames() {
    return {"a", "b", "e", "alpha", "beta", "eta", "c_m"};
  }
  static std::vector<std::string> ReportedNames() {
    return {"A", "B", "E", "alpha", "beta", "eta", "c_m"};
  }
  static bool LogScaled(int k) { return k <= 2; }
  // The dense runs and the MoL runs.
  static std::vector<std::string> Families() { return {"dense", "mol"}; }
  static bool Reads(const LawPoint& x) { return x.dense() || x.block_expansion > 0.0; }
  static bool Applies(const SweepFamilies& families) { return families.Has("mol"); }
  // A CSV row is a MoL run where block_expansion >= 1, a dense run where it is 0.
  static std::vector<std::string> CsvColumns() {
    return {"N_active", "N_total", "D", "block_expansion", "loss"};
  }
  static absl::Status CheckCsvRow(const LawPoint& x) {
    if (x.block_expansion == 0.0 || x.block_expansion >= 1.0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "block_expansion: must be 0 (a dense run) or at least 1 ((N - S) / top_k of a MoL run)");
  }
  static std::vector<std::string> HoldoutColumns() { return {"block_expansion"}; }
  static const char* RunsName() { return "MoL"; }
  static const char* NoDenseHint() { return "; add baselines: [dense] to the sweep"; }
  // The dense law's grid, then 4 x 3 = 12 starts for eta and c_m.
  static std::vector<std::vector<double>> StartGrid() {
    std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
    grid.push_back({-0.25, 0.0, 0.25, 0.5});  // eta
    grid.push_back({-0.1, 0.0, 0.1});         // c_m
    return grid;
  }
  // eta in [-1, 1] (a negative eta: the unused blocks cost capacity); c_m within
  // ten nats either way, so a flat direction stays bounded and a fit on a wall is
  // flagged.
  static std::vector<std::pair<double, double>> Bounds() {
    std::vector<std::pair<double, double>> bounds = DenseLaw::Bounds();
    bounds.push_back({-1.0, 1.0});    // eta
    bounds.push_back({-10.0, 10.0});  // c_m
    return bounds;
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::exp;
    using std::log;
    if (x.block_expansion <= 0.0) {  // a dense run: the dense law
      return LogSumExp3(p[0] - p[3] * std::log(x.n), p[1] - p[4] * std::log(x.d), p[2]);
    }
    const T log_n_eff = T(std::log(x.n)) + p[5] * std::log(x.block_expansion);
    T log_dense;
    if (x.has_reference) {  // the dense law of the point's context, frozen
      const double* q = x.reference;
      log_dense =
          LogSumExp3(T(q[0]) - T(q[3]) * log_n_eff, T(q[1] - q[4] * std::log(x.d)), T(q[2]));
    } else {
      log_dense = LogSumExp3(p[0] - p[3] * log_n_eff, p[1] - p[4] * std::log(x.d), p[2]);
    }
    return log(exp(log_dense) + p[6]);  // NaN when c_m drives it below 0
  }
  static std::map<std::string, double> Report(const double* p) {
    std::map<std::string, double> r = DenseLaw::Report(p);
    r["eta"] = p[5];
    r["c_m"] = p[6];
    return r;
  }
  static std::vector<double> Inputs(const LawPoint& x) {
    if (x.block_expansion <= 0.0) return {x.n, x.d};
    return {x.n, x.d, x.block_expansion};
  }
  // What the two extras need from the MoL runs: two distinct (N, D, Ê_b) at least;
  // eta and c_m are told apart by two expansions, or by two sizes at one.
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<std::tuple<double, double, double>> runs;
    for (const LawPoint& x : points) {
      if (x.block_expansion > 0.0) runs.insert({x.n, x.d, x.block_expansion});
    }
    if (runs.empty()) {
      return absl::InvalidArgumentError(
          "degenerate data: the mol law needs MoL runs; none were given");
    }
    if (runs.size() < 2) {
      return absl::InvalidArgumentError(
          "degenerate data: the mol law's two extras (eta, c_m) need MoL runs at two or more "
          "distinct (N_active, D, block expansion)");
    }
    return absl::OkStatus();
  }
  // What eta and c_m need of a sweep's planned MoL runs.
  static void CheckDesign(const std::vector<LawPoint>& planned, DesignSink* sink) {
    std::set<std::tuple<double, double, double>> runs;
    std::set<double> expansions;
    for (const LawPoint& x : planned) {
      if (x.family != "mol") continue;
      runs.insert({x.n, x.d, x.block_expansion});
      expansions.insert(x.block_expansion);
    }
    if (runs.empty()) {
      sink->Error("grid", "design.laws names mol but the sweep has no MoL job");
      return;
    }
    if (runs.size() < 2) {
      sink->Error("grid", absl::StrCat("the MoL law's 2 extras see ", runs.size(),
                                       " distinct MoL run; give at least 2 (more scales, "
                                       "budgets or block sparsities)"));
    }
    if (expansions.size() < 2) {
      sink->Warn("grid.sparsity",
                 "one block sparsity: eta and c_m are told apart only by how the runs' sizes "
                 "move the dense law (a wide interval); add a second block sparsity, or fit "
                 "with --fix eta=0");
    }
    sink->Note(absl::StrCat("the MoL extras: ", runs.size(), " distinct MoL runs, ",
                            expansions.size(), " block expansions"));
  }
  // c_m and eta's effect at each block expansion of the fitted runs: the loss a MoL
  // run differs from the dense law by, at the runs' geometric-mean N_active and D.
  static std::vector<std::pair<std::string, double>> Derived(const double* p,
                                                             const std::vector<LawPoint>& points) {
    std::set<double> expansions;
    double log_n = 0.0, log_d = 0.0;
    int count = 0;
    for (const LawPoint& x : points) {
      if (x.block_expansion <= 0.0) continue;
      expansions.insert(x.block_expansion);
      log_n += std::log(x.n);
      log_d += std::log(x.d);
      ++count;
    }
    if (count == 0) return {};
    log_n /= count;
    log_d /= count;
    std::vector<std::pair<std::string, double>> out;
    const double dense =
        std::exp(p[0] - p[3] * log_n) + std::exp(p[1] - p[4] * log_d) + std::exp(p[2]);
    for (double e : expansions) {
      const double mol = std::exp(p[0] - p[3] * (log_n + p[5] * std::log(e))) +
                         std::exp(p[1] - p[4] * log_d) + std::exp(p[2]) + p[6];
      out.push_back({absl::StrFormat("Delta_mol[E_b=%g,N0=%.3g,D0=%.3g]", e, std::exp(log_n),
                                     std::exp(log_d)),
                     mol - dense});
    }
    return out;
  }
  static const char* DerivedNote() {
    return "the MoL run's loss minus the dense law's at each block expansion, at the MoL runs' "
           "geometric-mean N0 and D0 (nats; < 0: MoL is better)";
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_MOL_LAW_H_
