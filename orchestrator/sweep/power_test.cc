// The power check (power.h) on the demo's design: it assumes the law fitted at the
// demo's own scale, simulates, fits and advises every draw under it and under it
// with a misfit, reports a spread per free parameter that grows with the noise,
// takes design.fix's parameters as known, and refuses an unknown assumption.
#include "orchestrator/sweep/power.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

SweepSpec Demo() {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/sweeps/demo.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(Power, SimulatesTheDesignAtItsOwnScaleAndItsSpreadGrowsWithTheNoise) {
  const SweepSpec spec = Demo();
  const auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  PowerOptions o;
  // 4 simulated sweeps per noise level (they were 6): the noisy level's noise is 15x
  // the quiet one's, so its parameter spread is larger in any draw of a few.
  o.simulations = 4;
  o.noise = 0.002;
  const absl::StatusOr<PowerReport> quiet = PowerCheck(spec, *jobs, o);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  ASSERT_EQ(quiet->calibration.cases.size(), 2u);  // the law, and the law with a misfit
  const CalibrationCase& law = quiet->calibration.cases[0];
  EXPECT_EQ(law.advised, 4) << law.failure;
  // The demo's tiny models get the law fitted at their own scale, not Chinchilla's
  // (which gives them 20-41-nat losses).
  EXPECT_NE(quiet->truth_source.find("sweeps/demo.yaml"), std::string::npos);
  EXPECT_LT(quiet->truth_n_min, 1e6);
  for (const auto& [name, loss] : law.truth_loss) {
    EXPECT_GT(loss, 1.0) << name;
    EXPECT_LT(loss, 4.0) << name;
  }
  EXPECT_EQ(quiet->fixed, (std::vector<std::string>{"beta_T", "psi"}));  // the demo's design.fix
  std::map<std::string, double> quiet_sd;
  for (const PowerParameter& p : quiet->parameters) {
    EXPECT_NE(p.name, "psi");  // frozen: not estimated
    EXPECT_TRUE(std::isfinite(p.sd) && p.sd >= 0) << p.name;
    quiet_sd[p.name] = p.sd;
  }
  EXPECT_EQ(quiet_sd.count("eta"), 1u);
  EXPECT_FALSE(law.truth_best.empty());
  int picked = 0;
  for (const auto& [name, count] : law.picks) picked += count;
  EXPECT_EQ(picked, law.advised);
  const CalibrationCase& misfit = quiet->calibration.cases[1];
  EXPECT_DOUBLE_EQ(misfit.misfit, 0.004);  // twice the noise by default
  EXPECT_EQ(misfit.advised, 4) << misfit.failure;
  // The lack-of-fit test runs on the design's replicates under both truths.
  EXPECT_EQ(law.lof_tested, 4);
  EXPECT_EQ(misfit.lof_tested, 4);
  EXPECT_EQ(quiet->powered, law.hits >= 0.8 * law.advised);
  o.noise = 0.03;
  o.misfit = 0;  // the spread alone: no second truth
  const absl::StatusOr<PowerReport> noisy = PowerCheck(spec, *jobs, o);
  ASSERT_TRUE(noisy.ok()) << noisy.status();
  std::map<std::string, double> noisy_sd;
  for (const PowerParameter& p : noisy->parameters) noisy_sd[p.name] = p.sd;
  EXPECT_GT(noisy_sd["alpha"], quiet_sd["alpha"]);
  EXPECT_GT(noisy_sd["c_s"], quiet_sd["c_s"]);
  const std::string text = PowerText(*quiet);
  EXPECT_NE(text.find("expected se"), std::string::npos) << text;
  EXPECT_NE(text.find("advise at C = "), std::string::npos) << text;
  EXPECT_NE(text.find("frozen by design.fix"), std::string::npos) << text;
  EXPECT_NE(text.find("under the law with a misfit of 0.4% of the loss"), std::string::npos)
      << text;
  EXPECT_NE(text.find(quiet->powered ? "the decision is powered" : "NOT powered"),
            std::string::npos)
      << text;
}

TEST(Power, RefusesAnUnknownAssumptionAndADesignWithoutXmodJobs) {
  const SweepSpec spec = Demo();
  const auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok());
  PowerOptions o;
  o.simulations = 2;
  o.assume["kappa"] = 1.0;
  absl::StatusOr<PowerReport> r = PowerCheck(spec, *jobs, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no parameter 'kappa'"), std::string::npos) << r.status();
  std::vector<ResolvedJob> dense_only;
  for (const ResolvedJob& j : *jobs) {
    if (j.file.shape.family == Family::kDense) dense_only.push_back(j);
  }
  o.assume.clear();
  r = PowerCheck(spec, dense_only, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs dense and X-MoD jobs"), std::string::npos);
}

}  // namespace
}  // namespace xmod
