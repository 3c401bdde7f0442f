#include "orchestrator/sweep/power.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/stats.h"
#include "common/status_macros.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/calibrate.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/sweep/design_check.h"

namespace xmod {

namespace {

// The demo's X-MoD law (DemoLaw below): `xmod fit demo --law xmod` on the run of
// 2026-12-06 that docs/laws.md reports (34 runs, beta_T = 0.5 and psi = 1 frozen;
// E went to its bound near 0 and eta to 1; the form is rejected by its replicates,
// F = 7.9). A truth at the demo's scale, not a law to believe.
constexpr double kDemoE = 1.18e-16, kDemoA = 2.074, kDemoB = 11.80, kDemoAlpha = 0.1315,
                 kDemoBeta = 0.1508, kDemoEta = 1.0, kDemoCT = 0.4615, kDemoCs = 0.02376;
constexpr double kDemoNMin = 1.23e4, kDemoNMax = 1.11e5;

// An assumed law and the N_active range of the runs it was fitted on.
struct AssumedLaw {
  std::map<std::string, double> values;
  std::string source;
  double n_min = 0.0, n_max = 0.0;
};

// Epoch AI's refit of Chinchilla (Besiroglu et al. 2024: E = 1.8172, A = 477.8,
// B = 2143, alpha = 0.34731, beta = 0.36716; Hoffmann et al.'s models of 44M to
// 16B parameters, token-level); the X-MoD extras are working values.
AssumedLaw Chinchilla() {
  return {{{"E", 1.8172},
           {"A", 477.8},
           {"B", 2143.0},
           {"alpha", 0.34731},
           {"beta", 0.36716},
           {"eta", 0.5},
           {"c_T", 1.0},
           {"beta_T", 0.5},
           {"c_s", 0.02},
           {"psi", 1.0}},
          "Epoch AI's refit of Chinchilla (44M-16B parameters, token-level; Besiroglu et al. "
          "2024), X-MoD extras at working values",
          4.4e7,
          1.6e10};
}

// The X-MoD law fitted to sweeps/demo.yaml's runs (byte-level Brown corpus,
// N_active 1.2e4-1.1e5, one run on two cores; docs/laws.md, "What the demo's laws
// show"), beta_T and psi frozen as the demo freezes them.
AssumedLaw DemoLaw() {
  return {{{"E", kDemoE},
           {"A", kDemoA},
           {"B", kDemoB},
           {"alpha", kDemoAlpha},
           {"beta", kDemoBeta},
           {"eta", kDemoEta},
           {"c_T", kDemoCT},
           {"beta_T", 0.5},
           {"c_s", kDemoCs},
           {"psi", 1.0}},
          "the X-MoD law fitted to sweeps/demo.yaml's runs (byte-level Brown corpus; "
          "docs/laws.md)",
          kDemoNMin,
          kDemoNMax};
}

// How far (in e-folds of N) a design's N_active range is from a law's.
double Distance(const AssumedLaw& law, double lo, double hi) {
  if (hi < law.n_min) return std::log(law.n_min / hi);
  if (lo > law.n_max) return std::log(lo / law.n_max);
  return 0.0;
}

// The planned dense and X-MoD runs the laws would read (no trunk, no lr scan).
absl::StatusOr<std::vector<LawPoint>> PlannedPoints(const std::vector<ResolvedJob>& jobs) {
  std::vector<LawPoint> planned;
  for (const ResolvedJob& j : jobs) {
    if (!j.dense_law_point() && j.file.shape.family != Family::kXmod) continue;
    if (std::string_view(j.role()) == "trunk") continue;
    if (j.file.lr_factor.has_value()) continue;  // the lr scan: the laws read one lr
    LawPoint x = PlannedPoint(j);
    if (x.family != "dense" && x.family != "xmod") continue;
    x.scale = j.scale;
    x.loss = 1.0;
    x.config = absl::StrFormat("%s|%.17g|%.17g|%.17g|%g|%g|%g", x.family, x.n, x.NTotal(), x.d,
                               x.context, x.capacity, x.stride);
    planned.push_back(x);
  }
  bool sparse = false, dense = false;
  for (const LawPoint& x : planned) (x.dense() ? dense : sparse) = true;
  if (!sparse || !dense) {
    return absl::InvalidArgumentError(
        "--power simulates the X-MoD law's design: the sweep needs dense and X-MoD jobs");
  }
  return planned;
}

// The assumed law into r (the one fitted nearest the design's N_active, with
// `assume` and the design's frozen parameters over it), in the law's internal
// units.
absl::StatusOr<std::vector<double>> AssumedRaw(const LawSpec& law,
                                               const std::map<std::string, double>& fixed,
                                               const PowerOptions& o, PowerReport* r) {
  const AssumedLaw chinchilla = Chinchilla(), demo = DemoLaw();
  const AssumedLaw& assumed = Distance(demo, r->design_n_min, r->design_n_max) <
                                      Distance(chinchilla, r->design_n_min, r->design_n_max)
                                  ? demo
                                  : chinchilla;
  r->truth = assumed.values;
  r->truth_source = assumed.source;
  r->truth_n_min = assumed.n_min;
  r->truth_n_max = assumed.n_max;
  for (const auto& [name, value] : o.assume) {
    if (r->truth.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--assume ", name, ": the xmod law has no parameter '", name,
                       "' (it has: ", absl::StrJoin(law.parameters, ", "), ")"));
    }
    r->truth[name] = value;
  }
  for (const auto& [name, value] : fixed) {
    r->truth[name] = value;  // a frozen parameter is taken as known
    r->fixed.push_back(name);
  }
  std::vector<double> raw;
  for (size_t k = 0; k < law.parameters.size(); ++k) {
    const double v = r->truth.at(law.parameters[k]);
    if (law.log_scaled[k] && !(v > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--assume ", law.parameters[k], ": must be above 0"));
    }
    raw.push_back(law.log_scaled[k] ? std::log(v) : v);
  }
  return raw;
}

// Each free parameter's mean and spread over the simulations under the law.
void Parameters(const LawSpec& law, const std::map<std::string, double>& fixed, PowerReport* r) {
  const CalibrationCase& c = r->calibration.cases.front();
  for (const std::string& name : law.parameters) {
    const auto it = c.estimates.find(name);
    if (it == c.estimates.end() || fixed.count(name) > 0) continue;
    PowerParameter p;
    p.name = name;
    p.truth = r->truth.at(name);
    p.mean = Mean(it->second);
    p.sd = SampleSd(it->second);
    r->parameters.push_back(p);
  }
}

}  // namespace

absl::StatusOr<PowerReport> PowerCheck(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs,
                                       const PowerOptions& o) {
  if (!(o.noise > 0) || !std::isfinite(o.noise)) {
    return absl::InvalidArgumentError("--noise: must be a positive relative sd (e.g. 0.005)");
  }
  if (o.simulations < 2) return absl::InvalidArgumentError("--simulations: at least 2");
  const LawSpec* law = FindLaw("xmod");
  PowerReport r;
  ASSIGN_OR_RETURN(const std::vector<LawPoint> planned, PlannedPoints(jobs));
  r.design_n_min = r.design_n_max = planned.front().n;
  for (const LawPoint& x : planned) {
    r.design_n_min = std::min(r.design_n_min, x.n);
    r.design_n_max = std::max(r.design_n_max, x.n);
  }
  const auto fix = spec.design.fix.find("xmod");
  std::map<std::string, double> fixed;
  if (fix != spec.design.fix.end()) fixed = fix->second;
  ASSIGN_OR_RETURN(const std::vector<double> raw, AssumedRaw(*law, fixed, o, &r));
  AdviseOptions advise;
  advise.bootstrap = 0;  // the decision is the top pick; no refits behind it
  advise.holdout = false;
  advise.dense_forms = false;
  advise.threads = o.threads;
  advise.fixed = spec.design.fix;
  // Where `xmod advise` answers by default: the largest compute every
  // configuration is planned at (each row inside its own runs), smallest context.
  advise.compute = DefaultCompute(planned);
  advise.context = planned.front().context;
  for (const LawPoint& x : planned) advise.context = std::min(advise.context, x.context);
  r.compute = advise.compute;
  r.context = advise.context;
  CalibrationOptions c;
  c.sweeps = o.simulations;
  c.noise = o.noise;
  c.misfit = o.misfit >= 0 ? o.misfit : 2.0 * o.noise;
  c.seed = o.seed;
  const LossFunction truth = [&](const LawPoint& x) {
    return std::exp(law->log_loss(raw.data(), x));
  };
  ASSIGN_OR_RETURN(r.calibration, Calibrate(planned, truth, advise, c));
  Parameters(*law, fixed, &r);
  const CalibrationCase& under_law = r.calibration.cases.front();
  r.powered =
      under_law.advised > 0 && static_cast<double>(under_law.hits) / under_law.advised >= kPowered;
  return r;
}

namespace {

// The decision and the lack-of-fit test under one truth, for people.
std::string CaseText(const CalibrationCase& c) {
  std::vector<std::string> picks;
  for (const auto& [name, count] : c.picks) picks.push_back(absl::StrCat(name, ": ", count));
  std::string out = absl::StrFormat(
      "the truth's best is %s; advise picks it in %d of %d simulations (%.0f%%; picks: %s)\n",
      c.truth_best, c.hits, c.advised, 100.0 * Share(c.hits, c.advised),
      absl::StrJoin(picks, ", "));
  if (c.lof_tested == 0) {
    absl::StrAppend(&out, "  lack of fit: not testable (no seed replicates in the design)\n");
    return out;
  }
  const double rate = Share(c.lof_rejected, c.lof_tested);
  const bool inflated = rate > 0.05 + 2.0 * BinomialSe(0.05, c.lof_tested);
  absl::StrAppend(
      &out, absl::StrFormat("  lack of fit rejects the form in %d of %d fits (%.0f%%): %s\n",
                            c.lof_rejected, c.lof_tested, 100.0 * rate,
                            c.misfit == 0 ? (inflated ? "its size at this design, ABOVE its 5% "
                                                        "level: a rejection here means less"
                                                      : "its size at this design (level 5%)")
                                          : "its power against this misfit"));
  return out;
}

}  // namespace

std::string PowerText(const PowerReport& r) {
  const Calibration& cal = r.calibration;
  const int sweeps = cal.cases.empty() ? 0 : cal.cases.front().sweeps;
  std::string out = absl::StrFormat(
      "power: %d simulations of the design under an assumed X-MoD law, %.2g%% log-normal seed "
      "noise per run\n",
      sweeps, 100.0 * cal.noise);
  std::vector<std::string> truth;
  for (const auto& [name, value] : r.truth) truth.push_back(absl::StrFormat("%s=%g", name, value));
  absl::StrAppend(&out, "assumed: ", absl::StrJoin(truth, ", "), "\n");
  absl::StrAppend(
      &out, absl::StrFormat("  from %s, fitted on N_active %.3g-%.3g, the nearer in scale to this "
                            "design's %.3g-%.3g; override with --assume NAME=VALUE\n",
                            r.truth_source, r.truth_n_min, r.truth_n_max, r.design_n_min,
                            r.design_n_max));
  if (!r.fixed.empty()) {
    absl::StrAppend(
        &out, "frozen by design.fix (known, not estimated): ", absl::StrJoin(r.fixed, ", "), "\n");
  }
  if (cal.cases.empty()) return out;
  const CalibrationCase& law = cal.cases.front();
  absl::StrAppend(
      &out, absl::StrFormat("fitted and advised: %d of %d simulations", law.advised, law.sweeps));
  if (!law.failure.empty()) absl::StrAppend(&out, "; commonest failure: ", law.failure);
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, absl::StrFormat("%-8s %12s %12s %12s %12s\n", "param", "truth", "mean",
                                        "expected se", "bias/se"));
  for (const PowerParameter& p : r.parameters) {
    absl::StrAppend(
        &out, absl::StrFormat("%-8s %12.4g %12.4g %12.4g %12.3g\n", p.name, p.truth, p.mean, p.sd,
                              p.sd > 0 ? (p.mean - p.truth) / p.sd : 0.0));
  }
  absl::StrAppend(&out, absl::StrFormat("advise at C = %.3g, T = %g (the largest compute every "
                                        "configuration is planned at)\n",
                                        r.compute, r.context));
  absl::StrAppend(&out, "under the law: ", CaseText(law));
  const auto form = law.forms.find("xmod");
  absl::StrAppend(&out, absl::StrFormat("  the information criterion prefers the true (constant) "
                                        "form in %d of %d\n",
                                        form == law.forms.end() ? 0 : form->second, law.advised));
  if (cal.cases.size() > 1) {
    const CalibrationCase& misfit = cal.cases[1];
    absl::StrAppend(&out,
                    absl::StrFormat("under the law with a misfit of %.2g%% of the loss (RMS over "
                                    "the design; an N x D interaction its form cannot express): ",
                                    100.0 * misfit.misfit),
                    CaseText(misfit));
  }
  absl::StrAppend(
      &out, r.powered
                ? absl::StrFormat("the decision is powered: right in %.0f%% under the law (at "
                                  "least %.0f%%)\n",
                                  100.0 * Share(law.hits, law.advised), 100.0 * kPowered)
                : absl::StrFormat("WARNING: the decision is NOT powered: right in only %.0f%% of "
                                  "the simulations under the law (below %.0f%%); more seeds, "
                                  "scales or budgets near the decision's compute would help\n",
                                  100.0 * Share(law.hits, law.advised), 100.0 * kPowered));
  return out;
}

}  // namespace xmod
