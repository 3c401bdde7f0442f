// How far to believe an advice at its own design (docs/laws.md, "Calibration"):
// sweeps with the design's runs are drawn from a known truth with log-normal seed
// noise, each is fitted and advised as `xmod advise` would, and the advice is
// scored against the truth. Two truths: the law as given (`xmod advise
// --calibrate`: the sweep's own fit; `xmod check --power`: an assumed law), and
// the same law with a misfit its form cannot express, a smooth N x D interaction
// of a stated size. The scores: how often the top pick is the truth's best against
// its mean P(best), how often the intervals cover the truth, how often the
// decision hold-out catches a wrong pick, how often the lack-of-fit test rejects
// the form, and how often the advice says it is not calibrated.
#ifndef XMOD_ORCHESTRATOR_FIT_CALIBRATE_H_
#define XMOD_ORCHESTRATOR_FIT_CALIBRATE_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct CalibrationOptions {
  int sweeps = 20;      // simulated sweeps per truth
  double noise = 0.0;   // log-normal seed noise of one run's loss (sd of log-loss); > 0
  double misfit = 0.0;  // RMS over the design of the perturbed truth's misfit (log-loss);
                        // 0: no perturbed truth
  uint64_t seed = 1;
};

// The scores under one truth.
struct CalibrationCase {
  std::string truth;                         // "law" or "law + misfit"
  double misfit = 0.0;                       // the misfit's RMS over the design (log-loss)
  std::string truth_best;                    // the truth's best configuration at the advice's C
  std::map<std::string, double> truth_loss;  // each configuration's true optimum loss at C
  int sweeps = 0;
  int advised = 0;                           // sweeps the advice answered
  std::string failure;                       // the commonest reason it did not (empty: none)
  int hits = 0;                              // top pick == truth_best
  double mean_p_best = 0.0;                  // of the top pick, over the advised sweeps
  int covered = 0, intervals = 0;            // loss intervals holding the true optimum loss
  int gain_covered = 0, gain_intervals = 0;  // gain intervals holding the true gain
  int wrong = 0;                             // wrong picks ...
  int caught = 0;                            // ... on which the decision hold-out said FAILS
  int false_alarms = 0;                      // right picks on which it said FAILS
  int holdout_ran = 0;                       // sweeps with a decision hold-out
  int lof_tested = 0, lof_rejected = 0;      // the used X-MoD form's lack-of-fit test
  int uncalibrated = 0;  // sweeps whose advice said its P(best) is not calibrated
  std::map<std::string, int> picks;
  std::map<std::string, int> forms;  // the X-MoD form each advice used
  // The first X-MoD form's fitted parameters over the sweeps, by reported name.
  std::map<std::string, std::vector<double>> estimates;
};

struct Calibration {
  double noise = 0.0;
  std::string noise_source;   // where the noise figure comes from
  std::string misfit_source;  // where the misfit's size comes from
  int bootstrap = 0;
  std::vector<CalibrationCase> cases;  // the law, then (misfit > 0) the perturbed law
};

// Simulates o.sweeps sweeps with the runs of `design` (their N, D, context,
// configuration and replicate structure; their losses are ignored) from `truth`
// (a loss per run; +inf or NaN: the run cannot be simulated, an error), and from
// it times exp(misfit · z), z the standardised ln N × ln D interaction over the
// design (RMS 1). Each is advised with `advise`. INVALID_ARGUMENT for bad options
// or a truth that gives a run no finite loss.
absl::StatusOr<Calibration> Calibrate(const std::vector<LawPoint>& design,
                                      const LossFunction& truth, const AdviseOptions& advise,
                                      const CalibrationOptions& o);

// `xmod advise --calibrate N`: `advice` calibrated at its own design: the runs
// `points` it was made from (those of a family no fitted law predicts are left
// out), the truth its own fitted laws, the noise their pooled seed sd, the misfit
// `misfit` (< 0: the used X-MoD form's measured misfit, at least the seed noise).
// INVALID_ARGUMENT without replicates to measure the noise.
absl::StatusOr<Calibration> CalibrateAdvice(const Advice& advice,
                                            const std::vector<LawPoint>& points, int sweeps,
                                            double misfit, uint64_t seed);

// The pooled seed sd of log-loss over the configurations of `points` with two or
// more runs (0: none has).
double PooledSeedNoise(const std::vector<LawPoint>& points);

nlohmann::json CalibrationJson(const Calibration& c);

// For people: one paragraph per truth, and a line saying whether P(best) and the
// intervals can be read at face value at this design.
std::string CalibrationText(const Calibration& c);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_CALIBRATE_H_
