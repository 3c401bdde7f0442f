// The power check (power.h) on the demo's design: it simulates, fits and advises
// every draw, reports a spread per free parameter that grows with the noise, takes
// design.fix's parameters as known, and refuses an unknown assumption.
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

TEST(Power, SimulatesTheDesignAndItsSpreadGrowsWithTheNoise) {
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
  EXPECT_EQ(quiet->fitted, 4) << quiet->failure;
  EXPECT_EQ(quiet->fixed, (std::vector<std::string>{"beta_T", "psi"}));  // the demo's design.fix
  std::map<std::string, double> quiet_sd;
  for (const PowerParameter& p : quiet->parameters) {
    EXPECT_NE(p.name, "psi");  // frozen: not estimated
    EXPECT_TRUE(std::isfinite(p.sd) && p.sd >= 0) << p.name;
    quiet_sd[p.name] = p.sd;
  }
  EXPECT_EQ(quiet_sd.count("eta"), 1u);
  EXPECT_FALSE(quiet->truth_best.empty());
  EXPECT_EQ(quiet->advised, 4);
  int picked = 0;
  for (const auto& [name, count] : quiet->picks) picked += count;
  EXPECT_EQ(picked, quiet->advised);
  o.noise = 0.03;
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
