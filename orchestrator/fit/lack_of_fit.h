// The lack-of-fit F-test of a fitted law (docs/laws.md, "Lack of fit"): whether
// the law's residuals are larger than the scatter of seed replicates allows.
//
// With n points in m configurations (a configuration: every input but the seed),
// log-loss residuals r = ln L_observed − ln L_predicted and p free parameters,
//   SS_pure = Σ_configurations Σ_seeds (r − r̄_configuration)²,  df_pure = n − m,
//   SS_lack = Σ r² − SS_pure,                                    df_lack = m − p,
//   F = (SS_lack / df_lack) / (SS_pure / df_pure),
// and p_value = P(F(df_lack, df_pure) > F). The form is rejected when p_value <
// alpha. The test needs replicates (df_pure > 0) and more configurations than
// parameters (df_lack > 0); otherwise it is unavailable and says why.
//
// One configuration much noisier than the rest would dominate SS_pure and leave
// the test without power (the demo had one at 2.7% against a 0.23% median).
// Cochran's C = max s²_c / Σ s²_c over the configurations with replicates screens
// for it (at level 0.01, three or more such configurations); a configuration it
// flags is left out of both sums (its seeds and its mean), and the test runs on
// the others, saying so.
#ifndef XMOD_ORCHESTRATOR_FIT_LACK_OF_FIT_H_
#define XMOD_ORCHESTRATOR_FIT_LACK_OF_FIT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xmod {

struct LackOfFit {
  bool available = false;
  std::string why;  // why the test could not be run (available == false)
  int points = 0;
  int configurations = 0;
  int parameters = 0;
  double ss_pure = 0.0;
  double ss_lack = 0.0;
  int df_pure = 0;
  int df_lack = 0;
  double f = 0.0;
  double p_value = 1.0;
  double alpha = 0.05;
  bool rejected = false;
  // The misfit's size beside the seed noise, both in log-loss (a fraction of the
  // loss): noise_rms = sqrt(SS_pure / df_pure), the scatter of one run's seeds;
  // misfit_rms = sqrt(max(0, SS_lack - df_lack SS_pure / df_pure) / points), the
  // root-mean-square systematic error of the law per run beyond what the seeds
  // explain (SS_lack's expectation is df_lack σ² plus the squared misfit). 0 when
  // F <= 1.
  double noise_rms = 0.0;
  double misfit_rms = 0.0;
  // The configuration Cochran's screen left out ("" none), its seed sd over the
  // others' pooled sd, and C against its critical value.
  std::string excluded;
  double excluded_ratio = 0.0;
  double cochran_c = 0.0, cochran_critical = 0.0;
};

// The test on `residuals` (log-loss, one per point) whose configurations are
// `configurations` (equal strings: replicates of one configuration), for a law
// with `parameters` free parameters, at level `alpha`.
LackOfFit LackOfFitTest(const std::vector<double>& residuals,
                        const std::vector<std::string>& configurations, int parameters,
                        double alpha = 0.05);

// {"available", "F", "df": [df_lack, df_pure], "p", "rejected", "alpha", "ss_lack",
// "ss_pure", "configurations", "parameters", "misfit_rms", "noise_rms"}, or
// {"available": false, "why"}.
nlohmann::json LackOfFitJson(const LackOfFit& test);

// One line for people: "lack of fit: F = 12.1 on (10, 18) df, p = 0.0012 < 0.05:
// the form is rejected by its replicates ...; misfit 1.2% of the loss (RMS) against a
// seed noise of 0.31%" (or "... not rejected", or why it could not be run).
std::string DescribeLackOfFit(const LackOfFit& test);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_LACK_OF_FIT_H_
