// `xmod check SPEC --power`: before any spend, how well would this design answer
// its question if an assumed law were true (docs/design-checks.md, "Power")? The
// planned dense and X-MoD jobs get losses drawn from the law with log-normal seed
// noise, many times over; each draw is fitted as `xmod run` would fit it (with the
// sweep's design.fix) and advised as `xmod advise` would advise it, and the report
// gives each free parameter's expected standard error and bias, how often the
// lack-of-fit test rejects the true form, how often the information criterion
// picks it, and how often advise picks the configuration the truth makes best.
#ifndef XMOD_ORCHESTRATOR_SWEEP_POWER_H_
#define XMOD_ORCHESTRATOR_SWEEP_POWER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

struct PowerOptions {
  double noise = 0.005;  // relative seed noise of a final loss (log-normal sd)
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

struct PowerReport {
  std::map<std::string, double> truth;  // the assumed law, reported names
  std::vector<std::string> fixed;       // frozen by design.fix (not estimated)
  double noise = 0.0;
  int simulations = 0;
  int fitted = 0;       // simulations whose X-MoD fit succeeded
  std::string failure;  // the commonest reason a simulation's fit failed
  int rejected = 0;     // of the fitted, how often lack of fit rejected the true form
  int testable = 0;     // of the fitted, how often the lack-of-fit test could run
  int form_right = 0;   // how often the constant form had the lower AIC (the truth's)
  std::vector<PowerParameter> parameters;
  double compute =
      0.0;  // where advise was asked: the largest compute every configuration is planned at ...
  double context = 0.0;  // ... at the smallest context
  std::string truth_best;
  int advised = 0;       // simulations advise answered
  int advise_right = 0;  // of them, picking truth_best
  std::map<std::string, int> picks;
};

// INVALID_ARGUMENT when the sweep has no dense and X-MoD jobs, for a bad option
// or an unknown name in `assume`.
absl::StatusOr<PowerReport> PowerCheck(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs,
                                       const PowerOptions& options);

// The report for people: the assumptions, the parameter table and the rates.
std::string PowerText(const PowerReport& report);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_POWER_H_
