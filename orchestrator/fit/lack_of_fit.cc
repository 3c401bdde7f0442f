#include "orchestrator/fit/lack_of_fit.h"

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xmod {

LackOfFit LackOfFitTest(const std::vector<double>& residuals,
                        const std::vector<std::string>& configurations, int parameters,
                        double alpha) {
  LackOfFit t;
  t.alpha = alpha;
  t.parameters = parameters;
  t.points = static_cast<int>(residuals.size());
  std::map<std::string, std::vector<double>> groups;
  double ss_total = 0.0;
  for (size_t i = 0; i < residuals.size(); ++i) {
    groups[configurations[i]].push_back(residuals[i]);
    ss_total += residuals[i] * residuals[i];
  }
  t.configurations = static_cast<int>(groups.size());
  for (const auto& [key, r] : groups) {
    double mean = 0.0;
    for (double v : r) mean += v;
    mean /= static_cast<double>(r.size());
    for (double v : r) t.ss_pure += (v - mean) * (v - mean);
  }
  t.df_pure = t.points - t.configurations;
  t.df_lack = t.configurations - parameters;
  t.ss_lack = std::max(0.0, ss_total - t.ss_pure);
  if (t.df_pure <= 0) {
    t.why = "no configuration has two or more seeds (no pure error to test against)";
    return t;
  }
  if (t.df_lack <= 0) {
    t.why = absl::StrCat(t.configurations, " configurations for ", parameters,
                         " free parameters (no degree of freedom for lack of fit)");
    return t;
  }
  if (!(t.ss_pure > 0.0)) {
    t.why = "the replicates agree exactly (zero pure error)";
    return t;
  }
  t.available = true;
  const double pure_variance = t.ss_pure / t.df_pure;
  t.f = (t.ss_lack / t.df_lack) / pure_variance;
  t.noise_rms = std::sqrt(pure_variance);
  t.misfit_rms = std::sqrt(std::max(0.0, t.ss_lack - t.df_lack * pure_variance) / t.points);
  const boost::math::fisher_f_distribution<double> dist(t.df_lack, t.df_pure);
  t.p_value = boost::math::cdf(boost::math::complement(dist, t.f));
  t.rejected = t.p_value < alpha;
  return t;
}

nlohmann::json LackOfFitJson(const LackOfFit& t) {
  if (!t.available) return {{"available", false}, {"why", t.why}};
  return {{"available", true},
          {"F", t.f},
          {"df", {t.df_lack, t.df_pure}},
          {"p", t.p_value},
          {"rejected", t.rejected},
          {"alpha", t.alpha},
          {"ss_lack", t.ss_lack},
          {"ss_pure", t.ss_pure},
          {"configurations", t.configurations},
          {"parameters", t.parameters},
          {"misfit_rms", t.misfit_rms},
          {"noise_rms", t.noise_rms}};
}

std::string DescribeLackOfFit(const LackOfFit& t) {
  if (!t.available) return absl::StrCat("lack of fit: not tested: ", t.why);
  return absl::StrFormat(
      "lack of fit: F = %.3g on (%d, %d) df, p = %.2g %s %g: %s; misfit %.2g%% of the loss "
      "(RMS) against a seed noise of %.2g%%",
      t.f, t.df_lack, t.df_pure, t.p_value, t.rejected ? "<" : ">=", t.alpha,
      t.rejected ? "the form is REJECTED by its replicates (its parameters describe a law the "
                   "data do not follow)"
                 : "not rejected by the replicates",
      100.0 * t.misfit_rms, 100.0 * t.noise_rms);
}

}  // namespace xmod
