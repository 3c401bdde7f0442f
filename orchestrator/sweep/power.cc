#include "orchestrator/sweep/power.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/sweep/design_check.h"

namespace xmod {

namespace {

// The assumed law: the dense part is Epoch AI's refit of Chinchilla (Besiroglu et
// al. 2024: E = 1.8172, A = 477.8, B = 2143, alpha = 0.34731, beta = 0.36716, for
// token-level models of 1e7 parameters and up); the X-MoD extras are our working
// values, not published ones.
std::map<std::string, double> DefaultTruth() {
  return {{"E", 1.8172}, {"A", 477.8}, {"B", 2143.0},   {"alpha", 0.34731}, {"beta", 0.36716},
          {"eta", 0.5},  {"c_T", 1.0}, {"beta_T", 0.5}, {"c_s", 0.02},      {"psi", 1.0}};
}

double Sd(const std::vector<double>& v, double* mean) {
  *mean = 0.0;
  for (double x : v) *mean += x / static_cast<double>(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - *mean) * (x - *mean);
  return v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0;
}

// The planned dense and X-MoD runs the laws would read (no trunk, no lr scan),
// each with the loss the truth `raw` (internal units of `law`) gives it.
absl::StatusOr<std::vector<LawPoint>> PlannedPoints(const std::vector<ResolvedJob>& jobs,
                                                    const LawSpec& law,
                                                    const std::vector<double>& raw) {
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
    x.loss = std::exp(law.log_loss(raw.data(), x));
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

// `o.simulations` draws of `planned` with seed noise, each fitted as `xmod run`
// fits (with `fixed` frozen) and advised with `advise`, counted into `r`.
void Simulate(const std::vector<LawPoint>& planned, const AdviseOptions& advise,
              const std::map<std::string, double>& fixed, const PowerOptions& o, const LawSpec& law,
              PowerReport* out) {
  PowerReport& r = *out;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::map<std::string, std::vector<double>> estimates;
  std::map<std::string, int> failures;
  AnalysisOptions fit;
  fit.law = "xmod";
  fit.fixed = fixed;
  fit.fit.threads = o.threads;
  for (int s = 0; s < o.simulations; ++s) {
    std::vector<LawPoint> drawn = planned;
    for (LawPoint& x : drawn) x.loss *= std::exp(o.noise * normal(rng));
    const absl::StatusOr<LawReport> fitted = FitNamedLaw(drawn, fit);
    if (!fitted.ok()) {
      ++failures[std::string(fitted.status().message())];
      continue;
    }
    ++r.fitted;
    if (fitted->lack_of_fit.available) {
      ++r.testable;
      r.rejected += fitted->lack_of_fit.rejected;
    }
    for (const auto& [name, value] : fitted->fit.params) {
      if (fixed.count(name) == 0) estimates[name].push_back(value);
    }
    const absl::StatusOr<Advice> advice = Advise(drawn, advise);
    if (advice.ok() && !advice->rows.empty()) {
      ++r.advised;
      const std::string& pick = advice->rows.front().configuration.name;
      ++r.picks[pick];
      r.advise_right += pick == r.truth_best;
      r.form_right += advice->form == "xmod";
    }
  }
  if (!failures.empty()) {
    const auto commonest =
        std::max_element(failures.begin(), failures.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    r.failure = absl::StrCat(commonest->first, " (", commonest->second, ")");
  }
  for (const std::string& name : law.parameters) {
    const auto it = estimates.find(name);
    if (it == estimates.end()) continue;
    PowerParameter p;
    p.name = name;
    p.truth = r.truth.at(name);
    p.sd = Sd(it->second, &p.mean);
    r.parameters.push_back(p);
  }
}

}  // namespace

absl::StatusOr<PowerReport> PowerCheck(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs,
                                       const PowerOptions& o) {
  if (!(o.noise >= 0) || !std::isfinite(o.noise)) {
    return absl::InvalidArgumentError("--noise: must be a non-negative relative sd (e.g. 0.005)");
  }
  if (o.simulations < 2) return absl::InvalidArgumentError("--simulations: at least 2");
  const LawSpec* law = FindLaw("xmod");
  PowerReport r;
  r.noise = o.noise;
  r.simulations = o.simulations;
  r.truth = DefaultTruth();
  for (const auto& [name, value] : o.assume) {
    if (r.truth.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--assume ", name, ": the xmod law has no parameter '", name,
                       "' (it has: ", absl::StrJoin(law->parameters, ", "), ")"));
    }
    r.truth[name] = value;
  }
  const auto fix = spec.design.fix.find("xmod");
  std::map<std::string, double> fixed;
  if (fix != spec.design.fix.end()) fixed = fix->second;
  for (const auto& [name, value] : fixed) {
    r.truth[name] = value;  // a frozen parameter is taken as known
    r.fixed.push_back(name);
  }
  // The truth in the law's internal units.
  std::vector<double> raw;
  for (size_t k = 0; k < law->parameters.size(); ++k) {
    const double v = r.truth.at(law->parameters[k]);
    if (law->log_scaled[k] && !(v > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--assume ", law->parameters[k], ": must be above 0"));
    }
    raw.push_back(law->log_scaled[k] ? std::log(v) : v);
  }
  ASSIGN_OR_RETURN(const std::vector<LawPoint> planned, PlannedPoints(jobs, *law, raw));
  AdviseOptions advise;
  advise.bootstrap = 0;
  advise.holdout = false;
  advise.dense_forms = false;
  advise.threads = o.threads;
  advise.fixed = spec.design.fix;
  advise.context = planned.front().context;
  // Where `xmod advise` answers by default: the largest compute every
  // configuration is planned at (each row inside its own runs).
  advise.compute = DefaultCompute(planned);
  for (const LawPoint& x : planned) advise.context = std::min(advise.context, x.context);
  r.compute = advise.compute;
  r.context = advise.context;
  // The truth as a fitted law: one set of parameters, its own dense part.
  LawReport truth;
  truth.law = "xmod";
  truth.method = "joint";
  truth.fit.raw = raw;
  absl::StatusOr<std::string> best = BestConfiguration(truth, planned, advise);
  if (!best.ok()) return best.status();
  r.truth_best = *best;

  Simulate(planned, advise, fixed, o, *law, &r);
  return r;
}

std::string PowerText(const PowerReport& r) {
  std::string out = absl::StrFormat(
      "power: %d simulations of the design under an assumed X-MoD law, %.2g%% log-normal seed "
      "noise per run\n",
      r.simulations, 100.0 * r.noise);
  std::vector<std::string> truth;
  for (const auto& [name, value] : r.truth) truth.push_back(absl::StrFormat("%s=%g", name, value));
  absl::StrAppend(&out, "assumed: ", absl::StrJoin(truth, ", "),
                  " (dense part: Epoch AI's Chinchilla refit; extras: working values; override "
                  "with --assume NAME=VALUE)\n");
  if (!r.fixed.empty()) {
    absl::StrAppend(
        &out, "frozen by design.fix (known, not estimated): ", absl::StrJoin(r.fixed, ", "), "\n");
  }
  absl::StrAppend(&out, absl::StrFormat("fitted: %d of %d simulations", r.fitted, r.simulations));
  if (!r.failure.empty()) absl::StrAppend(&out, "; commonest failure: ", r.failure);
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, absl::StrFormat("%-8s %12s %12s %12s %12s\n", "param", "truth", "mean",
                                        "expected se", "bias/se"));
  for (const PowerParameter& p : r.parameters) {
    absl::StrAppend(
        &out, absl::StrFormat("%-8s %12.4g %12.4g %12.4g %12.3g\n", p.name, p.truth, p.mean, p.sd,
                              p.sd > 0 ? (p.mean - p.truth) / p.sd : 0.0));
  }
  if (r.testable > 0) {
    absl::StrAppend(
        &out, absl::StrFormat("lack of fit rejects the true form in %d of %d fits (its level is "
                              "5%%)\n",
                              r.rejected, r.testable));
  } else {
    absl::StrAppend(&out, "lack of fit: not testable (no seed replicates in the design)\n");
  }
  if (r.advised > 0) {
    std::vector<std::string> picks;
    for (const auto& [name, count] : r.picks) picks.push_back(absl::StrCat(name, ": ", count));
    absl::StrAppend(
        &out,
        absl::StrFormat("advise at C = %.3g, T = %g (the largest compute every configuration is "
                        "planned at): the truth's "
                        "best is %s; advise picks it in %d of %d simulations (%s); the "
                        "information criterion prefers the true (constant) form in %d of %d\n",
                        r.compute, r.context, r.truth_best, r.advise_right, r.advised,
                        absl::StrJoin(picks, ", "), r.form_right, r.advised));
  }
  return out;
}

}  // namespace xmod
