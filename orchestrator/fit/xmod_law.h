// The X-MoD law, our working form relative to the FLOP-matched dense law
// (docs/laws.md), in two competing forms of its corrections:
//   constant (law "xmod"):   L_x = L_dense(N_eff, D) + Δ_ctx + Δ_anc
//   scaled ("xmod-scaled"):  L_x = L_dense(N_eff, D) + (L_dense(N_eff, D) − E)·(Δ_ctx + Δ_anc)
//   N_eff = N_active · (N_total / N_active)^eta                  sparse-capacity gain
//   Δ_ctx = c_T · f_r · ((ρT)^(−beta_T) − T^(−beta_T)),  f_r = (L − ⌈L/s⌉)/L, the routed
//                                      share of the real layout; routed layers attend over ρT
//   Δ_anc = c_s · (1 − ρ) · (s − 1)^psi                           anchor-stride interaction
//   L_dense is the dense law at the run's own context T (fitted per context in
//   analysis.cc and carried by the point as its reference), so the extras describe
//   only the sparse correction, never the dense model's own dependence on T.
// In the constant form the corrections are losses (nats) that see neither N nor D;
// in the scaled form they are fractions of the dense model's reducible loss, so
// they shrink as N and D grow. For a dense run (s = 1 or ρ = 1) both corrections
// vanish and N_eff = N, so either form is the dense law there. The first five
// parameters are the dense law's, in its order, so a dense fit can be frozen into them.
#ifndef XMOD_ORCHESTRATOR_FIT_XMOD_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_XMOD_LAW_H_

#include <cmath>
#include <limits>
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

struct XModLaw : LawDefaults {
  static constexpr int kParameters = 10;
  static constexpr int kDenseParameters = DenseLaw::kParameters;
  static constexpr bool kTwoStage = true;
  static const char* Name() { return "xmod"; }
  static const char* Label() { return "X-MoD"; }
  static std::vector<std::string> ParameterNames() {
    return {"a", "b", "e", "alpha", "beta", "eta", "c_T", "beta_T", "c_s", "psi"};
  }
  static std::vector<std::string> ReportedNames() {
    return {"A", "B", "E", "alpha", "beta", "eta", "c_T", "beta_T", "c_s", "psi"};
  }
  static bool LogScaled(int k) { return k <= 2; }
  // The dense runs and the depth-routed ones (no experts).
  static std::vector<std::string> Families() { return {"dense", "xmod"}; }
  static bool Reads(const LawPoint& x) { return x.expansion <= 1.0; }
  static bool Applies(const SweepFamilies& families) { return families.Has("xmod"); }
  static std::vector<std::string> CsvColumns() {
    return {"N_active", "N_total", "D", "T", "capacity", "stride", "loss"};
  }
  static std::vector<std::string> HoldoutColumns() { return {"capacity", "stride"}; }
  // The dense law's grid, then 5 x 3 x 3 x 3 x 3 = 405 starts for the extras. The
  // two-stage fit freezes the dense parameters (so it tries the 405); the joint
  // fit starts from the two-stage optimum and from the dense optimum with each
  // extras start (analysis.cc), not from the 2.2 million full combinations.
  static std::vector<std::vector<double>> StartGrid() {
    std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
    grid.push_back({0.0, 0.25, 0.5, 0.75, 1.0});  // eta
    grid.push_back({0.0, 0.5, 2.0});              // c_T
    grid.push_back({0.25, 0.5, 1.0});             // beta_T
    grid.push_back({0.0, 0.02, 0.1});             // c_s
    grid.push_back({0.5, 1.0, 2.0});              // psi
    return grid;
  }
  // eta in [0, 1] and non-negative exponents as docs/laws.md says; the coefficients
  // get wide finite bounds so that a flat direction cannot run off to infinity.
  static std::vector<std::pair<double, double>> Bounds() {
    std::vector<std::pair<double, double>> bounds = DenseLaw::Bounds();
    bounds.push_back({0.0, 1.0});       // eta
    bounds.push_back({-100.0, 100.0});  // c_T
    bounds.push_back({0.0, 5.0});       // beta_T
    bounds.push_back({-10.0, 10.0});    // c_s
    bounds.push_back({0.0, 5.0});       // psi
    return bounds;
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::exp;
    using std::log;
    if (x.dense()) {  // exactly the dense law: N_eff = N, no corrections
      return LogSumExp3(p[0] - p[3] * std::log(x.n), p[1] - p[4] * std::log(x.d), p[2]);
    }
    const T log_n_eff = T(std::log(x.n)) + p[5] * std::log(x.NTotal() / x.n);
    // The dense reference: this law's own dense parameters, or the dense law
    // fitted at the run's context (analysis.cc), frozen.
    T log_dense;
    if (x.has_reference) {
      const double* q = x.reference;
      log_dense =
          LogSumExp3(T(q[0]) - T(q[3]) * log_n_eff, T(q[1] - q[4] * std::log(x.d)), T(q[2]));
    } else {
      log_dense = LogSumExp3(p[0] - p[3] * log_n_eff, p[1] - p[4] * std::log(x.d), p[2]);
    }
    return log(exp(log_dense) + Corrections(p, x));  // NaN when they drive it below 0
  }
  // Δ_ctx + Δ_anc at `x` (nats in the constant form, a fraction of the reducible
  // loss in the scaled one).
  template <typename T>
  static T Corrections(const T* p, const LawPoint& x) {
    using std::exp;
    const double s = x.stride, rho = x.capacity, t = x.context;
    const T ctx =
        p[6] * x.RoutedFraction() * (exp(-p[7] * std::log(rho * t)) - exp(-p[7] * std::log(t)));
    const T anc = p[8] * (1.0 - rho) * exp(p[9] * std::log(s - 1.0));
    return ctx + anc;
  }
  static std::map<std::string, double> Report(const double* p) {
    std::map<std::string, double> r = DenseLaw::Report(p);
    r["eta"] = p[5];
    r["c_T"] = p[6];
    r["beta_T"] = p[7];
    r["c_s"] = p[8];
    r["psi"] = p[9];
    return r;
  }
  static std::vector<double> Inputs(const LawPoint& x) {
    if (x.dense()) return {x.n, x.d, x.context};
    return {x.n, x.NTotal(), x.d, x.context, x.capacity, x.stride, x.layers};
  }
  // Δ_ctx, Δ_anc and their sum at each sparse design point of the fitted runs
  // (capacity ρ, stride s, context T, the routed share of its layout): what the
  // runs pin down where c_T, beta_T, c_s and psi are not separately identifiable
  // (with one context the split between Δ_ctx and Δ_anc can stay loose while the
  // sum is tight).
  static std::vector<std::pair<std::string, double>> Derived(const double* p,
                                                             const std::vector<LawPoint>& points) {
    std::set<std::tuple<double, double, double, double>> designs;
    for (const LawPoint& x : points) {
      if (!x.dense() && x.expansion <= 1.0) {
        designs.insert({x.capacity, x.stride, x.context, x.RoutedFraction()});
      }
    }
    std::vector<std::pair<std::string, double>> out;
    std::set<std::string> names;
    for (const auto& [rho, s, t, routed] : designs) {
      const double ctx =
          p[6] * routed * (std::exp(-p[7] * std::log(rho * t)) - std::exp(-p[7] * std::log(t)));
      const double anc = p[8] * (1.0 - rho) * std::exp(p[9] * std::log(s - 1.0));
      const std::string at =
          absl::StrFormat("sparsity=%g,stride=%g,T=%g,f_r=%.3g", 1.0 - rho, s, t, routed);
      if (names.insert(at).second) {
        out.push_back({absl::StrCat("Delta_ctx[", at, "]"), ctx});
        out.push_back({absl::StrCat("Delta_anc[", at, "]"), anc});
        out.push_back({absl::StrCat("Delta_total[", at, "]"), ctx + anc});
      }
    }
    return out;
  }
  static const char* DerivedNote() {
    return "the corrections at each sparse design point (nats added to the dense law at N_eff)";
  }
  // What the five extras need to be identifiable from the sparse runs.
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    std::set<double> strides;
    std::set<std::pair<double, double>> contexts;  // (ρT, T)
    bool bigger_backbone = false;
    for (const LawPoint& x : points) {
      if (x.dense()) continue;  // the fitter has checked every point is Valid()
      strides.insert(x.stride);
      contexts.insert({x.capacity * x.context, x.context});
      if (x.NTotal() != x.n) bigger_backbone = true;
    }
    if (strides.empty()) {
      return absl::InvalidArgumentError(
          "degenerate data: the xmod law needs sparse runs "
          "(stride > 1, capacity < 1); none were given");
    }
    if (strides.size() < 2 || contexts.size() < 2 || !bigger_backbone) {
      return absl::InvalidArgumentError(
          "degenerate data: the xmod law's extras need sparse runs at two or more strides, "
          "two or more routed context lengths (capacity x T), and N_total != N_active");
    }
    return absl::OkStatus();
  }
  // What the five extras need of a sweep's planned X-MoD runs: N_total above
  // N_active (eta), six or more distinct sparse runs, two strides (psi) and two
  // routed context lengths (c_T against beta_T).
  static void CheckDesign(const std::vector<LawPoint>& planned, DesignSink* sink) {
    std::set<std::tuple<double, double, double, double, double>> inputs;
    std::set<double> strides, routed_contexts;
    bool bigger = false;
    for (const LawPoint& x : planned) {
      if (x.family != "xmod") continue;
      inputs.insert({x.n, x.NTotal(), x.d, x.capacity, x.stride});
      strides.insert(x.stride);
      routed_contexts.insert(x.capacity * x.context);
      bigger |= x.NTotal() != x.n;
    }
    if (inputs.empty()) {
      sink->Error("grid", "design.laws names xmod but the sweep has no X-MoD job");
      return;
    }
    if (!bigger) {
      sink->Error("grid",
                  "every X-MoD job has N_total = N_active: eta cannot be fitted (use match: "
                  "flops)");
    }
    if (inputs.size() < 6) {
      sink->Error("grid", absl::StrCat("the X-MoD law's 5 extras see ", inputs.size(),
                                       " distinct sparse runs; give at least 6, or fit a "
                                       "reduced law with xmod fit --fix (and "
                                       "--allow-unidentifiable here)"));
    }
    if (strides.size() < 2) {
      sink->Warn("grid.stride",
                 "one anchor stride: psi (and c_s apart from the sparsity term) is not "
                 "identifiable; fit with --fix psi=1");
    }
    if (routed_contexts.size() < 2) {
      sink->Warn("grid.context",
                 "one routed context length (capacity x T): c_T and beta_T form a ridge; fit "
                 "with --fix beta_T=0.5");
    }
    sink->Note(absl::StrCat("the X-MoD extras: ", inputs.size(), " distinct sparse runs, ",
                            strides.size(), " strides, ", routed_contexts.size(),
                            " routed context lengths"));
  }
};

// The scaled form: the same parameters, the corrections multiplying the dense
// model's reducible loss L_dense(N_eff, D) − E instead of adding to it. Fitted
// beside the constant form by `xmod advise` and on request (`--law xmod-scaled`).
struct XModScaledLaw : XModLaw {
  static const char* Name() { return "xmod-scaled"; }
  static const char* DerivedNote() {
    return "the corrections at each sparse design point (fractions of the dense model's "
           "reducible loss L_dense(N_eff, D) - E)";
  }
  static const char* Label() { return "X-MoD (scaled corrections)"; }
  static bool Applies(const SweepFamilies& /*families*/) { return false; }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::exp;
    using std::log;
    if (x.dense()) return XModLaw::LogLoss(p, x);
    const T log_n_eff = T(std::log(x.n)) + p[5] * std::log(x.NTotal() / x.n);
    T log_dense, e;
    if (x.has_reference) {
      const double* q = x.reference;
      log_dense =
          LogSumExp3(T(q[0]) - T(q[3]) * log_n_eff, T(q[1] - q[4] * std::log(x.d)), T(q[2]));
      e = T(std::exp(q[2]));
    } else {
      log_dense = LogSumExp3(p[0] - p[3] * log_n_eff, p[1] - p[4] * std::log(x.d), p[2]);
      e = exp(p[2]);
    }
    const T dense = exp(log_dense);
    return log(dense + (dense - e) * Corrections(p, x));
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_XMOD_LAW_H_
