#include "orchestrator/fit/lack_of_fit.h"

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xmod {

namespace {

constexpr double kCochranLevel = 0.01;

// One configuration's residuals: count, sum of squares about their mean, and
// sum of squares about 0.
struct Group {
  int n = 0;
  double ss_within = 0.0;
  double ss_total = 0.0;
};

// Cochran's screen (lack_of_fit.h): the configuration whose replicate variance
// dominates, or groups.end().
std::map<std::string, Group>::const_iterator Cochran(const std::map<std::string, Group>& groups,
                                                     LackOfFit* t) {
  double sum = 0.0, largest = -1.0;
  int k = 0;
  auto worst = groups.end();
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    if (it->second.n < 2) continue;
    const double s2 = it->second.ss_within / (it->second.n - 1);
    sum += s2;
    ++k;
    if (s2 > largest) {
      largest = s2;
      worst = it;
    }
  }
  if (k < 3 || !(sum > 0.0)) return groups.end();
  const int nu = worst->second.n - 1;
  const boost::math::fisher_f_distribution<double> f(nu, (k - 1) * nu);
  const double q = boost::math::quantile(boost::math::complement(f, kCochranLevel / k));
  t->cochran_c = largest / sum;
  t->cochran_critical = 1.0 / (1.0 + (k - 1) / q);
  if (t->cochran_c <= t->cochran_critical) return groups.end();
  const double others = (sum - largest) / (k - 1);
  t->excluded = worst->first;
  t->excluded_ratio = others > 0 ? std::sqrt(largest / others) : 0.0;
  return worst;
}

// The F-test's line, without the screen's note.
std::string Describe(const LackOfFit& t) {
  return absl::StrFormat(
      "lack of fit: F = %.3g on (%d, %d) df, p = %.2g %s %g: %s; misfit %.2g%% of the loss "
      "(RMS) against a seed noise of %.2g%%",
      t.f, t.df_lack, t.df_pure, t.p_value, t.rejected ? "<" : ">=", t.alpha,
      t.rejected ? "the form is REJECTED by its replicates (its parameters describe a law the "
                   "data do not follow)"
                 : "not rejected by the replicates",
      100.0 * t.misfit_rms, 100.0 * t.noise_rms);
}

}  // namespace

LackOfFit LackOfFitTest(const std::vector<double>& residuals,
                        const std::vector<std::string>& configurations, int parameters,
                        double alpha) {
  LackOfFit t;
  t.alpha = alpha;
  t.parameters = parameters;
  std::map<std::string, Group> groups;
  std::map<std::string, std::vector<double>> values;
  for (size_t i = 0; i < residuals.size(); ++i) values[configurations[i]].push_back(residuals[i]);
  for (const auto& [key, r] : values) {
    Group& g = groups[key];
    g.n = static_cast<int>(r.size());
    double mean = 0.0;
    for (double v : r) mean += v / g.n;
    for (double v : r) {
      g.ss_within += (v - mean) * (v - mean);
      g.ss_total += v * v;
    }
  }
  const auto excluded = Cochran(groups, &t);
  double ss_total = 0.0;
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    if (it == excluded) continue;
    t.points += it->second.n;
    ++t.configurations;
    t.ss_pure += it->second.ss_within;
    ss_total += it->second.ss_total;
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
          {"noise_rms", t.noise_rms},
          {"excluded", t.excluded.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.excluded)},
          {"excluded_sd_ratio", t.excluded_ratio},
          {"cochran_c", t.cochran_c},
          {"cochran_critical", t.cochran_critical}};
}

std::string DescribeLackOfFit(const LackOfFit& t) {
  if (!t.available) return absl::StrCat("lack of fit: not tested: ", t.why);
  const std::string screened =
      t.excluded.empty()
          ? std::string()
          : absl::StrFormat(
                "; one configuration's seeds scatter %.2gx the others' (Cochran's C = %.2g > "
                "%.2g) and it is left out of the test: %s",
                t.excluded_ratio, t.cochran_c, t.cochran_critical, t.excluded);
  return absl::StrCat(Describe(t), screened);
}

}  // namespace xmod
