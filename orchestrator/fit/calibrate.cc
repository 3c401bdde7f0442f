#include "orchestrator/fit/calibrate.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace xmod {

double PooledSeedNoise(const std::vector<LawPoint>& points) {
  std::map<std::string, std::vector<double>> groups;
  for (const LawPoint& x : points) {
    if (x.loss > 0) groups[x.config].push_back(std::log(x.loss));
  }
  double ss = 0.0;
  int df = 0;
  for (const auto& [config, logs] : groups) {
    if (logs.size() < 2) continue;
    double mean = 0.0;
    for (double v : logs) mean += v / static_cast<double>(logs.size());
    for (double v : logs) ss += (v - mean) * (v - mean);
    df += static_cast<int>(logs.size()) - 1;
  }
  return df > 0 ? std::sqrt(ss / df) : 0.0;
}

namespace {

// The misfit's shape: the product of the centred ln N and ln D of a run, centred
// and scaled to RMS 1 over the design. A smooth interaction no law here has a
// term for (the demo's dense runs show one: the N effect grows with D).
struct Interaction {
  double mean_n = 0.0, mean_d = 0.0, mean_z = 0.0, rms = 1.0;

  explicit Interaction(const std::vector<LawPoint>& design) {
    const double k = static_cast<double>(design.size());
    for (const LawPoint& x : design) {
      mean_n += std::log(x.n) / k;
      mean_d += std::log(x.d) / k;
    }
    for (const LawPoint& x : design) mean_z += Raw(x) / k;
    double ss = 0.0;
    for (const LawPoint& x : design) ss += std::pow(Raw(x) - mean_z, 2) / k;
    rms = ss > 0 ? std::sqrt(ss) : 1.0;
  }
  double Raw(const LawPoint& x) const {
    return (std::log(x.n) - mean_n) * (std::log(x.d) - mean_d);
  }
  double operator()(const LawPoint& x) const { return (Raw(x) - mean_z) / rms; }
};

absl::Status CheckOptions(const std::vector<LawPoint>& design, const LossFunction& truth,
                          const CalibrationOptions& o) {
  if (o.sweeps < 2) return absl::InvalidArgumentError("--calibrate: at least 2 sweeps");
  if (!(o.noise > 0) || !std::isfinite(o.noise)) {
    return absl::InvalidArgumentError(
        "calibration: the seed noise must be positive (the sweep has no replicates to measure "
        "it: give --noise)");
  }
  if (!(o.misfit >= 0) || !std::isfinite(o.misfit)) {
    return absl::InvalidArgumentError("--misfit: a non-negative RMS share of the loss");
  }
  if (design.empty()) return absl::InvalidArgumentError("calibration: the design has no runs");
  for (const LawPoint& x : design) {
    const double loss = truth(x);
    if (!(loss > 0) || !std::isfinite(loss)) {
      return absl::InvalidArgumentError(absl::StrCat("calibration: the truth gives run ",
                                                     x.id.empty() ? x.config : x.id, " (", x.family,
                                                     ") no loss: no fitted law predicts it"));
    }
  }
  return absl::OkStatus();
}

// Scores one simulated sweep's advice against the truth into `c`.
void Score(const Advice& a, CalibrationCase* c) {
  ++c->advised;
  const ConfigurationAdvice& top = a.rows.front();
  const bool hit = top.configuration.name == c->truth_best;
  c->hits += hit;
  c->mean_p_best += top.p_best;
  ++c->picks[top.configuration.name];
  const auto dense = c->truth_loss.find("dense");
  for (const ConfigurationAdvice& r : a.rows) {
    const auto truth = c->truth_loss.find(r.configuration.name);
    if (a.refits == 0 || truth == c->truth_loss.end()) continue;
    ++c->intervals;
    c->covered += r.loss_interval.low <= truth->second && truth->second <= r.loss_interval.high;
    if (r.configuration.family == "dense" || dense == c->truth_loss.end()) continue;
    const double gain = dense->second - truth->second;
    ++c->gain_intervals;
    c->gain_covered += r.gain_interval.low <= gain && gain <= r.gain_interval.high;
  }
  if (a.holdout.available) {
    ++c->holdout_ran;
    c->wrong += !hit;
    c->caught += !hit && a.holdout.fails;
    c->false_alarms += hit && a.holdout.fails;
  } else {
    c->wrong += !hit;
  }
  if (!a.form.empty()) ++c->forms[a.form];
  if (!a.forms.empty() && a.forms.front().fitted) {
    for (const auto& [name, value] : a.forms.front().params) c->estimates[name].push_back(value);
  }
  for (const FormAdvice& f : a.forms) {
    if (f.law != a.form || !f.lack_of_fit.available) continue;
    ++c->lof_tested;
    c->lof_rejected += f.lack_of_fit.rejected;
  }
  c->uncalibrated += a.uncalibrated;
}

// o.sweeps draws of `design` from `truth` (a loss per run), each advised and
// scored into `c`. Sweep s draws its noise from seed o.seed + s, whatever the
// truth, so that the two truths see the same noise.
absl::Status Simulate(const std::vector<LawPoint>& design, const LossFunction& truth,
                      const AdviseOptions& advise, const CalibrationOptions& o,
                      CalibrationCase* c) {
  ASSIGN_OR_RETURN(c->truth_loss, OptimalLosses(truth, design, advise));
  double lowest = std::numeric_limits<double>::infinity();
  for (const auto& [name, loss] : c->truth_loss) {
    if (loss < lowest) {
      lowest = loss;
      c->truth_best = name;
    }
  }
  std::vector<double> exact;
  for (const LawPoint& x : design) exact.push_back(truth(x));
  std::map<std::string, int> failures;
  for (int s = 0; s < o.sweeps; ++s) {
    std::mt19937_64 rng(o.seed + static_cast<uint64_t>(s));
    std::normal_distribution<double> normal(0.0, o.noise);
    std::vector<LawPoint> drawn = design;
    for (size_t i = 0; i < drawn.size(); ++i) drawn[i].loss = exact[i] * std::exp(normal(rng));
    AdviseOptions each = advise;
    each.seed = advise.seed + static_cast<uint64_t>(s);
    ++c->sweeps;
    const absl::StatusOr<Advice> a = Advise(drawn, each);
    if (!a.ok() || a->rows.empty()) {
      ++failures[a.ok() ? std::string("no configuration ranked")
                        : std::string(a.status().message())];
      continue;
    }
    Score(*a, c);
  }
  if (c->advised > 0) c->mean_p_best /= c->advised;
  if (!failures.empty()) {
    const auto commonest =
        std::max_element(failures.begin(), failures.end(),
                         [](const auto& x, const auto& y) { return x.second < y.second; });
    c->failure = absl::StrCat(commonest->first, " (", commonest->second, ")");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(const std::vector<LawPoint>& design,
                                      const LossFunction& truth, const AdviseOptions& advise,
                                      const CalibrationOptions& o) {
  RETURN_IF_ERROR(CheckOptions(design, truth, o));
  Calibration out;
  out.noise = o.noise;
  out.bootstrap = advise.bootstrap;
  CalibrationCase law;
  law.truth = "law";
  RETURN_IF_ERROR(Simulate(design, truth, advise, o, &law));
  out.cases.push_back(std::move(law));
  if (o.misfit > 0) {
    const Interaction z(design);
    const LossFunction perturbed = [&](const LawPoint& x) {
      return truth(x) * std::exp(o.misfit * z(x));
    };
    CalibrationCase misfit;
    misfit.truth = "law + misfit";
    misfit.misfit = o.misfit;
    RETURN_IF_ERROR(Simulate(design, perturbed, advise, o, &misfit));
    out.cases.push_back(std::move(misfit));
  }
  return out;
}

absl::StatusOr<Calibration> CalibrateAdvice(const Advice& advice,
                                            const std::vector<LawPoint>& points, int sweeps,
                                            double misfit, uint64_t seed) {
  std::vector<LawPoint> design;
  for (const LawPoint& x : points) {
    if (x.Valid() && std::isfinite(FittedLoss(advice, x))) design.push_back(x);
  }
  CalibrationOptions o;
  o.sweeps = sweeps;
  o.seed = seed;
  o.noise = PooledSeedNoise(design);
  if (!(o.noise > 0)) {
    return absl::InvalidArgumentError(
        "--calibrate: the sweep has no seed replicates to measure its noise with");
  }
  std::string misfit_source = "given by --misfit";
  if (misfit < 0) {
    misfit = o.noise;
    misfit_source = "the seed noise (the used form's misfit is smaller)";
    for (const FormAdvice& f : advice.forms) {
      if (f.law == advice.form && f.lack_of_fit.available && f.lack_of_fit.misfit_rms > misfit) {
        misfit = f.lack_of_fit.misfit_rms;
        misfit_source = "the used form's measured misfit (lack of fit)";
      }
    }
  }
  o.misfit = misfit;
  const LossFunction truth = [&](const LawPoint& x) { return FittedLoss(advice, x); };
  ASSIGN_OR_RETURN(Calibration c, Calibrate(design, truth, advice.options, o));
  c.noise_source = "the pooled seed sd of the sweep's replicates";
  c.misfit_source = misfit_source;
  return c;
}

}  // namespace xmod
