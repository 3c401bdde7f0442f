// The advice's calibration (calibrate.h) on simulated sweeps whose truth is known.
// With the law true, the top pick's mean P(best) must match how often it is right
// (within 0.1) and the 95% loss intervals must cover the true loss in 90-98% of
// rows; under a misfit like the demo's (an N x D interaction the form lacks), the
// intervals must still cover 90%, or the advice must say that they are not
// calibrated. The design is small (four scales, two X-MoD configurations, two
// seeds) and its compute is chosen where the two X-MoD configurations are close,
// so that P(best) is far from 0 and 1 and a wrong probability shows.
#include "orchestrator/fit/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "orchestrator/fit/advise_test_util.h"
#include "orchestrator/fit/xmod_law.h"

namespace xmod {
namespace {

constexpr double kContext = 1024;
// a, b, e (logs), alpha, beta, eta, c_T, beta_T, c_s, psi.
const std::vector<double> kTruth = {
    std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, 0.8, 0.5, 0.5, 0.0725, 1.0};
constexpr double kNoise = 0.003;

// Four scales; dense at 10, 20 and 40 tokens per parameter, two X-MoD
// configurations at 10 and 40; two seeds each.
std::vector<LawPoint> Design() {
  std::vector<LawPoint> points;
  int k = 0;
  for (double n : {2e6, 6e6, 2e7, 6e7}) {
    const std::string scale = absl::StrFormat("s%d", ++k);
    auto add = [&](const LawPoint& x) {
      for (int seed = 0; seed < 2; ++seed) {
        LawPoint y = x;
        y.scale = scale;
        y.config = absl::StrFormat("%s/%g/%g/%g/%g", scale, x.n, x.d, x.capacity, x.stride);
        points.push_back(y);
      }
    };
    for (double tpp : {10.0, 20.0, 40.0}) add(advise_test::XModRun(n, tpp * n, 1, 1, kContext));
    for (double tpp : {10.0, 40.0}) {
      add(advise_test::XModRun(n, tpp * n, 0.5, 2, kContext));
      add(advise_test::XModRun(n, tpp * n, 0.125, 4, kContext));
    }
  }
  return points;
}

AdviseOptions Options() {
  AdviseOptions o;
  o.compute = 6.0 * 6e7 * 20 * 6e7;  // the largest scale at 20 tokens per parameter
  o.context = kContext;
  o.bootstrap = 20;
  o.forms = {"xmod"};
  o.fixed = {{"xmod", {{"beta_T", 0.5}, {"psi", 1.0}}}};
  o.holdout = false;
  return o;
}

double Truth(const LawPoint& x) { return std::exp(XModLaw::LogLoss(kTruth.data(), x)); }

void Print(const Calibration& c) { std::printf("%s", CalibrationText(c).c_str()); }

TEST(Calibration, PBestMatchesTheHitRateAndIntervalsCoverWithTheLawTrue) {
  CalibrationOptions o;
  o.sweeps = 20;
  o.noise = kNoise;
  o.misfit = 0.03;
  const absl::StatusOr<Calibration> c = Calibrate(Design(), Truth, Options(), o);
  ASSERT_TRUE(c.ok()) << c.status();
  Print(*c);
  ASSERT_EQ(c->cases.size(), 2u);
  const CalibrationCase& law = c->cases.front();
  ASSERT_EQ(law.advised, o.sweeps) << law.failure;
  const double hit = static_cast<double>(law.hits) / law.advised;
  EXPECT_LE(std::abs(law.mean_p_best - hit), 0.1);
  const double coverage = static_cast<double>(law.covered) / law.intervals;
  EXPECT_GE(coverage, 0.90);
  EXPECT_LE(coverage, 0.98);
  // Under a misfit like the demo's (the form rejected by its replicates), the
  // intervals still cover, or the advice says in most sweeps that they are not
  // calibrated.
  const CalibrationCase& misfit = c->cases[1];
  ASSERT_EQ(misfit.advised, o.sweeps) << misfit.failure;
  const double misfit_coverage = static_cast<double>(misfit.covered) / misfit.intervals;
  EXPECT_TRUE(misfit_coverage >= 0.9 || misfit.uncalibrated >= 0.8 * misfit.advised)
      << "coverage " << misfit_coverage << ", said uncalibrated in " << misfit.uncalibrated;
  EXPECT_EQ(CalibrationText(*c).find("MISLEADING"), std::string::npos);
}

}  // namespace
}  // namespace xmod
