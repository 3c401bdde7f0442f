// The lack-of-fit test's size for every law: datasets drawn from the law's own
// form (two seeds per configuration, 0.3% seed noise) and fitted as `xmod fit`
// fits them; at α = 0.05 the test may reject about 5% of them. The two-stage laws
// (xmod, xmod-scaled, moe, mol, gdn) are drawn at two contexts, so that their
// dense reference has two blocks in the joint refit (joint_refit.h). Before the
// joint refit, these laws' F averaged 1.5-1.7 under their own form and rejected
// 16-36% of such datasets; each test fails at that rate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law_registry.h"

namespace xmod {
namespace {

constexpr double kNoise = 0.003;
const double kScales[] = {2e7, 5e7, 1.2e8, 3e8};

// One configuration: a dense run (v = 0), or a sparse one of `law`'s kind, variant
// v (1, 2; for X-MoD 1-4: capacities 0.125 and 0.5 at strides 2 and 4).
LawPoint Configuration(const std::string& law, double n, double tpp, double context, int v) {
  LawPoint x;
  x.n = n;
  x.d = tpp * n;
  x.context = context;
  if (v > 0 && (law == "xmod" || law == "xmod-scaled")) {  // v = 1..4
    x.capacity = v % 2 == 1 ? 0.125 : 0.5;
    x.stride = v <= 2 ? 2.0 : 4.0;
    x.layers = 12;
    x.n_total = n * (1.0 + 0.1 * v);
  } else if (v > 0 && law == "moe") {
    x.expansion = v == 1 ? 4.0 : 16.0;
    x.n_total = n * (1.0 + 0.6 * (x.expansion - 1.0));
  } else if (v > 0 && law == "mol") {
    x.block_expansion = 2.0 * v;
    x.n_total = n * (1.0 + 0.5 * x.block_expansion);
  } else if (v > 0 && law == "gdn") {
    x.deltanet_share = 0.5 * v;
    x.n = 1.1 * n;
  }
  x.id = absl::StrCat(n, "/", tpp, "/", context, "/", v);
  return x;
}

// The design: four scales, two budgets (three for the dense laws, whose every run
// is dense) and every variant, at the law's contexts.
std::vector<LawPoint> Design(const std::string& law) {
  const bool dense = law == "dense" || law == "dense-context";
  const std::vector<double> budgets =
      dense ? std::vector<double>{10, 40, 160} : std::vector<double>{10, 40};
  std::vector<double> contexts = {256, 1024};
  if (law == "dense") contexts = {256};
  if (law == "dense-context") contexts = {256, 4096};
  std::vector<LawPoint> out;
  for (double n : kScales) {
    for (double tpp : budgets) {
      for (double t : contexts) {
        const int variants = dense ? 0 : (law == "xmod" || law == "xmod-scaled") ? 4 : 2;
        for (int v = 0; v <= variants; ++v) {
          out.push_back(Configuration(law, n, tpp, t, v));
        }
      }
    }
  }
  return out;
}

// Internal parameters of each law's truth (the dense law's five first).
std::vector<double> Truth(const std::string& law) {
  std::vector<double> p = {std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28};
  std::vector<double> extras;
  if (law == "xmod") extras = {0.35, 1.5, 0.4, 0.05, 0.8};
  if (law == "xmod-scaled") extras = {0.35, 1.0, 0.4, 0.05, 0.8};
  if (law == "moe") extras = {0.2, -0.01, -0.5, -0.02};
  if (law == "mol") extras = {0.3, 0.05};
  if (law == "gdn") extras = {-0.04};
  if (law == "dense-context") extras = {0.05};
  p.insert(p.end(), extras.begin(), extras.end());
  return p;
}

struct Size {
  int rejected = 0;
  int tested = 0;
  double mean_f = 0.0;
};

Size RejectionsUnderTheLaw(const std::string& law, int datasets, uint64_t seed) {
  const LawSpec* spec = FindLaw(law);
  EXPECT_NE(spec, nullptr);
  const std::vector<double> truth = Truth(law);
  EXPECT_EQ(truth.size(), spec->parameters.size());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, kNoise);
  AnalysisOptions options;
  options.law = law;
  options.fit.threads = 1;
  // A shorter multi-start than xmod fit's (its scouting and polishing decide where
  // the fit lands, not how F is calibrated there; data drawn from the law have one
  // clear basin): the least-squares and joint refits the test reads are as shipped.
  options.fit.scout_iterations = 1;
  options.fit.polish = 3;
  Size s;
  for (int i = 0; i < datasets; ++i) {
    std::vector<LawPoint> points;
    for (const LawPoint& c : Design(law)) {
      for (int replicate = 0; replicate < 2; ++replicate) {
        LawPoint x = c;
        x.config = c.id;
        x.loss = std::exp(spec->log_loss(truth.data(), x) + normal(rng));
        points.push_back(x);
      }
    }
    const absl::StatusOr<LawReport> fit = FitNamedLaw(points, options);
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok() || !fit->lack_of_fit.available) continue;
    ++s.tested;
    s.rejected += fit->lack_of_fit.rejected ? 1 : 0;
    s.mean_f += fit->lack_of_fit.f;
  }
  if (s.tested > 0) s.mean_f /= s.tested;
  return s;
}

// 43 datasets: at the nominal 5% the expected count is 2.15 and 3 of 43 (7.0%)
// is the most the acceptance allows; a test at the old two-stage sizes (16-36%)
// rejects 7 or more with probability above 0.97.
void ExpectNominalSize(const std::string& law, uint64_t seed) {
  const int kDatasets = 43;
  const Size s = RejectionsUnderTheLaw(law, kDatasets, seed);
  std::printf("%s: lack of fit rejected %d of %d datasets drawn from the law (mean F %.2f)\n",
              law.c_str(), s.rejected, s.tested, s.mean_f);
  EXPECT_EQ(s.tested, kDatasets);
  EXPECT_LE(s.rejected, 3) << law;
  EXPECT_LT(s.mean_f, 1.3) << law;
}

TEST(LackOfFitSize, DenseLaw) { ExpectNominalSize("dense", 1); }
TEST(LackOfFitSize, DenseContextLaw) { ExpectNominalSize("dense-context", 2); }
TEST(LackOfFitSize, XModLawAtTwoContexts) { ExpectNominalSize("xmod", 3); }
TEST(LackOfFitSize, XModScaledLawAtTwoContexts) { ExpectNominalSize("xmod-scaled", 4); }
TEST(LackOfFitSize, MoeLawAtTwoContexts) { ExpectNominalSize("moe", 5); }
TEST(LackOfFitSize, MolLawAtTwoContexts) { ExpectNominalSize("mol", 6); }
TEST(LackOfFitSize, GdnLawAtTwoContexts) { ExpectNominalSize("gdn", 7); }

}  // namespace
}  // namespace xmod
