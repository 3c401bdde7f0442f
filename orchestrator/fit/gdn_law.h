// The gdn law, xmod's working form for the dense model with Gated DeltaNet as its
// attention (docs/gated-deltanet.md, docs/laws.md), relative to the dense law at
// the run's context:
//   L_gdn = L_dense,T(N, D) + c_g · f,
// with N the run's own non-embedding parameters (the DeltaNet mixer's five
// projections against attention's four), D its tokens and f its share of layers
// that mix with Gated DeltaNet (1: every layer; 1/2: a hybrid keeping softmax in
// every second). c_g is what replacing softmax attention in every layer costs (> 0)
// or gains (< 0), in nats, with a hybrid charged in proportion to its share. At a
// dense run the law is the dense law. Two stages: the dense law per context, then
// c_g on the gdn runs. Neither Gated DeltaNet nor MoL fits a law; with runs at two
// shares the linear charge is testable (the lack-of-fit test with replicates, the
// residuals per share without).
#ifndef XMOD_ORCHESTRATOR_FIT_GDN_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_GDN_LAW_H_

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "orchestrator/fit/dense_law.h"

namespace xmod {

struct GdnLaw : LawDefaults {
  static constexpr int kParameters = 6;
  static constexpr int kDenseParameters = DenseLaw::kParameters;
  static constexpr bool kTwoStage = true;
  static const char* Name() { return "gdn"; }
  static const char* Label() { return "dense Gated DeltaNet"; }
  static std::vector<std::string> ParameterNames() {
    return {"a", "b", "e", "alpha", "beta", "c_g"};
  }
  static std::vector<std::string> ReportedNames() {
    return {"A", "B", "E", "alpha", "beta", "c_g"};
  }
  static bool LogScaled(int k) { return k <= 2; }
  static std::vector<std::string> Families() { return {"dense", "gdn"}; }
  static bool Reads(const LawPoint& x) { return x.dense() || x.deltanet_share > 0.0; }
  static bool Applies(const SweepFamilies& families) { return families.Has("gdn"); }
  // A CSV row is a gdn run where deltanet_share is in (0, 1], a dense run where it is 0.
  static std::vector<std::string> CsvColumns() { return {"N", "D", "deltanet_share", "loss"}; }
  static absl::Status CheckCsvRow(const LawPoint& x) {
    if (x.deltanet_share >= 0.0 && x.deltanet_share <= 1.0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "deltanet_share: must be in [0, 1] (0 for a dense run; the share of Gated DeltaNet "
        "layers of a gdn run)");
  }
  static std::vector<std::string> HoldoutColumns() { return {"deltanet_share"}; }
  static const char* RunsName() { return "gdn"; }
  static const char* NoDenseHint() { return "; add baselines: [dense] to the sweep"; }
  static std::vector<std::vector<double>> StartGrid() {
    std::vector<std::vector<double>> grid = DenseLaw::StartGrid();
    grid.push_back({-0.1, 0.0, 0.1});  // c_g
    return grid;
  }
  static std::vector<std::pair<double, double>> Bounds() {
    std::vector<std::pair<double, double>> bounds = DenseLaw::Bounds();
    bounds.push_back({-10.0, 10.0});  // c_g
    return bounds;
  }
  template <typename T>
  static T LogLoss(const T* p, const LawPoint& x) {
    using std::exp;
    using std::log;
    const double log_n = std::log(x.n), log_d = std::log(x.d);
    T log_dense;
    if (x.deltanet_share > 0.0 && x.has_reference) {  // the dense law of its context, frozen
      const double* q = x.reference;
      log_dense = T(
          std::log(std::exp(q[0] - q[3] * log_n) + std::exp(q[1] - q[4] * log_d) + std::exp(q[2])));
    } else {
      log_dense = LogSumExp3(p[0] - p[3] * log_n, p[1] - p[4] * log_d, p[2]);
    }
    if (x.deltanet_share <= 0.0) return log_dense;
    return log(exp(log_dense) + p[5] * x.deltanet_share);  // NaN when c_g drives it below 0
  }
  static std::map<std::string, double> Report(const double* p) {
    std::map<std::string, double> r = DenseLaw::Report(p);
    r["c_g"] = p[5];
    return r;
  }
  static std::vector<double> Inputs(const LawPoint& x) {
    if (x.deltanet_share <= 0.0) return {x.n, x.d};
    return {x.n, x.d, x.deltanet_share};
  }
  static absl::Status CheckPoints(const std::vector<LawPoint>& points) {
    for (const LawPoint& x : points) {
      if (x.deltanet_share > 0.0) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        "degenerate data: the gdn law needs gdn runs; none were given");
  }
  static void CheckDesign(const std::vector<LawPoint>& planned, DesignSink* sink) {
    std::set<double> shares;
    int runs = 0;
    for (const LawPoint& x : planned) {
      if (x.family != "gdn") continue;
      shares.insert(x.deltanet_share);
      ++runs;
    }
    if (runs == 0) {
      sink->Error("grid", "design.laws names gdn but the sweep has no gdn job");
      return;
    }
    if (shares.size() < 2) {
      sink->Warn("gdn.softmax_every",
                 "one share of DeltaNet layers: the linear charge c_g · f cannot be checked "
                 "against a second share");
    }
    sink->Note(absl::StrCat("the gdn extra: ", runs, " gdn runs at ", shares.size(),
                            " share(s) of DeltaNet layers"));
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_GDN_LAW_H_
