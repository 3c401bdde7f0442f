// `xmod check SPEC --power`: before any spend, how well would this design answer
// its question if an assumed law were true (docs/design-checks.md, "Power")? The
// planned dense and X-MoD jobs get losses drawn from the law with log-normal seed
// noise, many times over; each draw is fitted and advised as `xmod advise` would
// (with the sweep's design.fix), and the report gives each free parameter's
// expected standard error and bias, how often advise picks the configuration the
// truth makes best, how often the lack-of-fit test rejects the true form (its
// size) and how often the information criterion picks it; then the same under the
// law with a stated misfit (the test's power, the decision under misfit). The
// assumed law is the one fitted nearest the design's own scale (stated).
#ifndef XMOD_ORCHESTRATOR_SWEEP_POWER_H_
#define XMOD_ORCHESTRATOR_SWEEP_POWER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/calibrate.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

struct PowerOptions {
  double noise = 0.005;  // relative seed noise of a final loss (log-normal sd)
  // The misfit of the second truth: an N x D interaction of this RMS share of the
  // loss over the design (calibrate.h); < 0: twice the noise.
  double misfit = -1.0;
  int simulations = 40;
  uint64_t seed = 1;
  // Overrides of the assumed law by reported name (E, A, B, alpha, beta, eta, c_T,
  // beta_T, c_s, psi).
  std::map<std::string, double> assume;
  int threads = 0;
};

struct PowerParameter {
  std::string name;
  double truth = 0.0;
  double mean = 0.0;  // of the fitted values over the simulations that fitted
  double sd = 0.0;    // their spread: the parameter's expected standard error
};

// Below this share of right decisions under the assumed law the design is
// reported as not powered.
constexpr double kPowered = 0.8;

struct PowerReport {
  std::map<std::string, double> truth;  // the assumed law, reported names
  // Where the assumed law comes from, and the N_active range it was fitted on; the
  // design's own N_active range.
  std::string truth_source;
  double truth_n_min = 0.0, truth_n_max = 0.0;
  double design_n_min = 0.0, design_n_max = 0.0;
  std::vector<std::string> fixed;  // frozen by design.fix (not estimated)
  std::vector<PowerParameter> parameters;
  double compute = 0.0;  // where advise was asked: the largest compute every
  double context = 0.0;  // configuration is planned at, the smallest context
  // The simulations under the law (cases[0]) and under the law with a misfit
  // (cases[1]): right decisions, the lack-of-fit test's size and power.
  Calibration calibration;
  bool powered = false;  // right decisions under the law >= kPowered
};
// INVALID_ARGUMENT when the sweep has no dense and X-MoD jobs, for a bad option
// or an unknown name in `assume`.
absl::StatusOr<PowerReport> PowerCheck(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs,
                                       const PowerOptions& options);

// The report for people: the assumptions, the parameter table and the rates.
std::string PowerText(const PowerReport& report);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_POWER_H_
