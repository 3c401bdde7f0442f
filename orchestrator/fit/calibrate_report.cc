// The calibration (calibrate.h) for people and as JSON, with the verdicts'
// thresholds: P(best) is calibrated when its mean is within 0.1 of the hit rate
// (plus two binomial standard errors of the hit rate, the simulation's own noise);
// nominal 95% intervals are calibrated when they cover 90-98% of the truths.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/stats.h"
#include "orchestrator/fit/calibrate.h"

namespace xmod {

namespace {

constexpr double kPBestTolerance = 0.1;
constexpr double kCoverageLow = 0.90, kCoverageHigh = 0.98;

// Two binomial standard errors of a share p over n trials.
double TwoSe(double p, int n) { return 2.0 * BinomialSe(p, n); }

// "calibrated", "OVERCONFIDENT" or "underconfident": P(best) against the hit rate.
std::string PBestVerdict(const CalibrationCase& c) {
  const double hit = Share(c.hits, c.advised);
  const double tolerance = kPBestTolerance + TwoSe(hit, c.advised);
  const double gap = c.mean_p_best - hit;
  if (std::abs(gap) <= tolerance) return "calibrated";
  return gap > 0 ? "OVERCONFIDENT" : "underconfident";
}

std::string CoverageVerdict(int covered, int n) {
  const double share = Share(covered, n);
  const double se = TwoSe(share, n);
  if (share + se < kCoverageLow) return "TOO NARROW";
  if (share - se > kCoverageHigh) return "conservative";
  return "calibrated";
}

// Under the misfit: are the intervals still honest, and if not, does the advice
// say so?
std::string MisfitVerdict(const CalibrationCase& c) {
  const bool narrow = CoverageVerdict(c.covered, c.intervals) == "TOO NARROW";
  const double said = Share(c.uncalibrated, c.advised);
  if (!narrow) return "under this misfit the intervals still cover: the advice can be read";
  if (said >= 0.8) {
    return absl::StrFormat(
        "under this misfit the intervals are too narrow, and the advice says it is not calibrated "
        "in %.0f%% of the sweeps",
        100.0 * said);
  }
  return absl::StrFormat(
      "MISLEADING under this misfit: the intervals are too narrow and the advice says so in only "
      "%.0f%% of the sweeps (the lack-of-fit test lacks the power to see a misfit this size)",
      100.0 * said);
}

std::string CaseText(const CalibrationCase& c, int bootstrap) {
  std::string out = c.truth == "law"
                        ? std::string("truth: the law as given")
                        : absl::StrFormat(
                              "truth: the law with a misfit its form cannot express (an N x D "
                              "interaction, %.2g%% of the loss RMS over the design's runs)",
                              100.0 * c.misfit);
  absl::StrAppend(&out, absl::StrFormat("; its best at C: %s\n", c.truth_best));
  absl::StrAppend(&out,
                  absl::StrFormat("  advised in %d of %d simulated sweeps%s\n", c.advised, c.sweeps,
                                  c.failure.empty() ? "" : "; commonest failure: " + c.failure));
  if (c.advised == 0) return out;
  std::vector<std::string> picks;
  for (const auto& [name, count] : c.picks) picks.push_back(absl::StrCat(name, ": ", count));
  absl::StrAppend(&out, absl::StrFormat("  top pick is the truth's best in %d of %d (%.2f); picks: "
                                        "%s\n",
                                        c.hits, c.advised, Share(c.hits, c.advised),
                                        absl::StrJoin(picks, ", ")));
  if (bootstrap > 0) {
    absl::StrAppend(
        &out, absl::StrFormat("  mean P(best) of the top pick %.2f against its hit rate %.2f: %s\n",
                              c.mean_p_best, Share(c.hits, c.advised), PBestVerdict(c)));
    absl::StrAppend(
        &out, absl::StrFormat("  loss intervals hold the true optimum loss in %d of %d (%.0f%%): "
                              "%s; gain intervals hold the true gain in %d of %d (%.0f%%): %s\n",
                              c.covered, c.intervals, 100.0 * Share(c.covered, c.intervals),
                              CoverageVerdict(c.covered, c.intervals), c.gain_covered,
                              c.gain_intervals, 100.0 * Share(c.gain_covered, c.gain_intervals),
                              CoverageVerdict(c.gain_covered, c.gain_intervals)));
  }
  absl::StrAppend(
      &out, absl::StrFormat("  decision hold-out ran in %d; it said FAILS on %d of %d "
                            "wrong picks and on %d of %d right ones\n",
                            c.holdout_ran, c.caught, c.wrong, c.false_alarms, c.advised - c.wrong));
  if (c.lof_tested > 0) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  lack of fit rejects the form in %d of %d (%s; level 5%%)\n",
                        c.lof_rejected, c.lof_tested, c.truth == "law" ? "its size" : "its power"));
  }
  absl::StrAppend(&out, absl::StrFormat("  the advice said its P(best) is not calibrated in %d of "
                                        "%d\n",
                                        c.uncalibrated, c.advised));
  if (c.truth != "law" && bootstrap > 0) absl::StrAppend(&out, "  ", MisfitVerdict(c), "\n");
  return out;
}

}  // namespace

nlohmann::json CalibrationJson(const Calibration& c) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CalibrationCase& k : c.cases) {
    nlohmann::json j = {{"truth", k.truth},
                        {"misfit_rms", k.misfit},
                        {"truth_best", k.truth_best},
                        {"truth_loss", k.truth_loss},
                        {"sweeps", k.sweeps},
                        {"advised", k.advised},
                        {"failure", k.failure},
                        {"hits", k.hits},
                        {"hit_rate", Share(k.hits, k.advised)},
                        {"mean_p_best", k.mean_p_best},
                        {"covered", k.covered},
                        {"intervals", k.intervals},
                        {"coverage", Share(k.covered, k.intervals)},
                        {"gain_covered", k.gain_covered},
                        {"gain_intervals", k.gain_intervals},
                        {"gain_coverage", Share(k.gain_covered, k.gain_intervals)},
                        {"wrong", k.wrong},
                        {"caught", k.caught},
                        {"false_alarms", k.false_alarms},
                        {"holdout_ran", k.holdout_ran},
                        {"lack_of_fit_tested", k.lof_tested},
                        {"lack_of_fit_rejected", k.lof_rejected},
                        {"uncalibrated", k.uncalibrated},
                        {"picks", k.picks}};
    if (k.advised > 0 && c.bootstrap > 0) {
      j["p_best_verdict"] = PBestVerdict(k);
      j["coverage_verdict"] = CoverageVerdict(k.covered, k.intervals);
    }
    cases.push_back(std::move(j));
  }
  return {{"noise", c.noise},
          {"noise_source", c.noise_source},
          {"misfit_source", c.misfit_source},
          {"bootstrap", c.bootstrap},
          {"cases", cases}};
}

std::string CalibrationText(const Calibration& c) {
  std::string out = absl::StrFormat(
      "calibration: %d simulated sweeps per truth at this design (its runs and replicates), "
      "%.2g%% log-normal seed noise per run, %d bootstrap refits per advice\n",
      c.cases.empty() ? 0 : c.cases.front().sweeps, 100.0 * c.noise, c.bootstrap);
  if (!c.noise_source.empty()) absl::StrAppend(&out, "noise: ", c.noise_source, "\n");
  if (!c.misfit_source.empty()) absl::StrAppend(&out, "misfit's size: ", c.misfit_source, "\n");
  for (const CalibrationCase& k : c.cases) absl::StrAppend(&out, CaseText(k, c.bootstrap));
  if (c.bootstrap == 0) {
    absl::StrAppend(&out, "no refits (--bootstrap 0): P(best) and the intervals were not scored\n");
  }
  return out;
}

}  // namespace xmod
