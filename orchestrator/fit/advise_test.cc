// `xmod advise`'s decision (advise.h) on synthetic sweeps whose truth is known:
// drawn from each competing X-MoD form, it must pick that form by its information
// criterion and the configuration the truth makes best; its probabilities sum to
// one; the decision hold-out must agree with the largest scale when the data
// follow the law and fail when that scale is made to disagree; and it refuses a
// budget the sweep does not support unless told to extrapolate.
#include "orchestrator/fit/advise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "orchestrator/fit/advise_test_util.h"
#include "orchestrator/fit/xmod_law.h"

namespace xmod {
namespace {

constexpr double kContext = 1024;
// The truth: the dense law of a small-model sweep and the X-MoD extras, in
// internal units (ln A, ln B, ln E, alpha, beta, eta, c_T, beta_T, c_s, psi).
const std::vector<double> kConstantTruth = {
    std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, 0.8, 3.0, 0.5, 0.08, 1.0};
const std::vector<double> kScaledTruth = {
    std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, 0.8, 1.0, 0.5, 0.02, 1.0};
const std::vector<std::pair<double, double>> kSparse = {
    {0.5, 2}, {0.5, 4}, {0.125, 2}, {0.125, 4}};  // (capacity, stride)

LawPoint Point(double n, double tpp, double capacity, double stride) {
  return advise_test::XModRun(n, tpp * n, capacity, stride, kContext);
}

double TrueLoss(const LawPoint& x, bool scaled) {
  return std::exp(scaled ? XModScaledLaw::LogLoss(kScaledTruth.data(), x)
                         : XModLaw::LogLoss(kConstantTruth.data(), x));
}

// Four scales over 1.5 decades; dense at 10, 20 and 40 tokens per parameter,
// each X-MoD (capacity, stride) at 10 and 40; two seeds each; relative noise 0.3%.
std::vector<LawPoint> Sweep(bool scaled, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<std::pair<std::string, double>> scales = {
      {"s1", 2e6}, {"s2", 6e6}, {"s3", 2e7}, {"s4", 6e7}};
  std::vector<LawPoint> points;
  auto add = [&](const std::string& scale, LawPoint x) {
    for (int s = 0; s < 2; ++s) {
      LawPoint y = x;
      y.scale = scale;
      y.loss = TrueLoss(x, scaled) * std::exp(0.003 * normal(rng));
      y.config = absl::StrFormat("%s/%g/%g/%g", scale, x.d / x.n, x.capacity, x.stride);
      y.id = absl::StrCat(y.config, "/", s);
      points.push_back(y);
    }
  };
  for (const auto& [scale, n] : scales) {
    for (double tpp : {10.0, 20.0, 40.0}) add(scale, Point(n, tpp, 1, 1));
    for (const auto& [capacity, stride] : kSparse) {
      for (double tpp : {10.0, 40.0}) add(scale, Point(n, tpp, capacity, stride));
    }
  }
  return points;
}

// The configuration the truth makes best at compute C, searched as advise
// searches (N in the runs' range, 10-40 tokens per parameter).
std::string TrueBest(double compute, bool scaled) {
  std::string best;
  double lowest = 1e300;
  std::vector<std::pair<double, double>> configurations = kSparse;
  configurations.push_back({1, 1});
  for (const auto& [capacity, stride] : configurations) {
    for (int i = 0; i <= 400; ++i) {
      const double n = std::exp(std::log(2e6) + (std::log(6e7) - std::log(2e6)) * i / 400);
      const double tpp = compute / (6 * n) / n;
      if (tpp < 10 || tpp > 40) continue;
      const double loss = TrueLoss(Point(n, tpp, capacity, stride), scaled);
      if (loss < lowest) {
        lowest = loss;
        best = stride > 1 ? absl::StrFormat("xmod sparsity=%g stride=%g", 1 - capacity, stride)
                          : "dense";
      }
    }
  }
  return best;
}

AdviseOptions Options(double compute) {
  AdviseOptions o;
  o.compute = compute;
  o.context = kContext;
  // 24 refits (they were 40): P(best) and the intervals of a clear decision; the
  // tests that read them ask for a majority, not a precise share.
  o.bootstrap = 24;
  o.seed = 7;
  return o;
}

TEST(Advise, RecoversTheConstantFormAndItsDecision) {
  const double compute = 3e17;
  ASSERT_EQ(TrueBest(compute, false), "xmod sparsity=0.5 stride=2");
  const absl::StatusOr<Advice> a = Advise(Sweep(false, 1), Options(compute));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->form, "xmod");
  ASSERT_FALSE(a->rows.empty());
  EXPECT_EQ(a->rows.front().configuration.name, TrueBest(compute, false));
  EXPECT_GT(a->rows.front().p_best, 0.5);
  EXPECT_TRUE(a->extrapolation.empty());
  // Probabilities over the refits sum to one; every row has its interval.
  double total = 0.0;
  for (const ConfigurationAdvice& r : a->rows) {
    total += r.p_best;
    EXPECT_LE(r.loss_interval.low, r.loss_interval.high) << r.configuration.name;
    EXPECT_GT(r.loss, 0.0);
  }
  EXPECT_GT(a->refits, 12);  // most of the 24 refits succeed
  EXPECT_NEAR(total, 1.0, 1e-12);
  // The dense row's gain is zero by definition; the winner's is positive.
  for (const ConfigurationAdvice& r : a->rows) {
    if (r.configuration.family == "dense") {
      EXPECT_EQ(r.gain, 0.0);
    }
  }
  EXPECT_GT(a->rows.front().gain, 0.0);
  const nlohmann::json j = AdviceJson(*a);
  EXPECT_EQ(j.at("form"), "xmod");
  EXPECT_EQ(j.at("configurations").size(), 5u);
  EXPECT_TRUE(j.at("extrapolation").is_null());
}

// Losses far from any floor (E = 0, as the demo's and the MoL sweep's): the dense
// law's E goes to its bound, and the advice says its law is not identified.
TEST(Advise, SaysWhenItsLawIsNotIdentified) {
  std::vector<LawPoint> points;
  for (double n : {1e4, 3e4, 1e5}) {
    for (double tpp : {20.0, 80.0, 320.0}) {
      for (int seed = 0; seed < 2; ++seed) {
        LawPoint x = Point(n, tpp, 1, 1);
        x.loss = (2.0 / std::pow(n, 0.1) + 12.0 / std::pow(x.d, 0.15)) * (1 + 0.001 * seed);
        x.config = absl::StrFormat("%g/%g", n, tpp);
        x.id = absl::StrCat(x.config, "/", seed);
        points.push_back(x);
      }
    }
  }
  AdviseOptions o = Options(6.0 * 3e4 * 80 * 3e4);
  o.bootstrap = 0;
  const absl::StatusOr<Advice> a = Advise(points, o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->unidentified.size(), 1u);
  EXPECT_EQ(a->unidentified.front(), "dense: E->0");
  EXPECT_NE(a->verdict.find("NOT IDENTIFIED by these runs: parameters on a bound (dense: E->0)"),
            std::string::npos)
      << a->verdict;
  EXPECT_EQ(AdviceJson(*a).at("unidentified"), nlohmann::json({"dense: E->0"}));
}

TEST(Advise, RecoversTheScaledFormAndItsDecision) {
  const double compute = 3e17;
  ASSERT_EQ(TrueBest(compute, true), "xmod sparsity=0.875 stride=4");
  const absl::StatusOr<Advice> a = Advise(Sweep(true, 2), Options(compute));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->form, "xmod-scaled");
  EXPECT_EQ(a->rows.front().configuration.name, TrueBest(compute, true));
  EXPECT_GT(a->rows.front().p_best, 0.5);
  ASSERT_EQ(a->forms.size(), 2u);
  for (const FormAdvice& f : a->forms) {
    ASSERT_TRUE(f.fitted) << f.law << ": " << f.error;
    EXPECT_GE(f.holdout_rmse, 0.0);
  }
  // The true form has the lower criterion.
  EXPECT_LT(a->forms[1].information.aic, a->forms[0].information.aic);
}

TEST(Advise, TheDecisionHoldoutAgreesWithALawfulScaleAndFailsOnAnAdverseOne) {
  const double compute = 3e17;
  std::vector<LawPoint> points = Sweep(false, 3);
  const absl::StatusOr<Advice> a = Advise(points, Options(compute));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->holdout.available) << a->holdout.why;
  EXPECT_EQ(a->holdout.scale, "s4");
  EXPECT_EQ(a->holdout.rows.size(), 5u);
  // The truth's top two are within 0.1% there, so the seeds may order them either
  // way: the decision holds, or the hold-out cannot tell; it must not fail.
  EXPECT_FALSE(a->holdout.fails) << a->holdout.chosen << " vs " << a->holdout.observed_best
                                 << ", regret " << a->holdout.regret;
  EXPECT_EQ(a->holdout.verdict, a->holdout.holds ? "holds" : "cannot tell");
  EXPECT_EQ(a->holdout.dense_scales, 3);
  EXPECT_NEAR(a->holdout.compute, 6.0 * 6e7 * 6e7 * 10, 1e6);  // the first of two full budgets
  EXPECT_GT(a->holdout.noise, 0.0);
  EXPECT_LT(a->holdout.regret, 0.01);
  // Make the chosen configuration 5% worse at the held-out scale only: the fit
  // without that scale still chooses it, and the check must say it fails there.
  const std::string chosen = a->holdout.chosen;
  for (LawPoint& x : points) {
    const std::string name =
        x.dense() ? "dense"
                  : absl::StrFormat("xmod sparsity=%g stride=%g", 1 - x.capacity, x.stride);
    if (x.scale == "s4" && name == chosen) x.loss *= 1.05;
  }
  AdviseOptions o = Options(compute);
  o.bootstrap = 0;
  const absl::StatusOr<Advice> b = Advise(points, o);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(b->holdout.available) << b->holdout.why;
  EXPECT_EQ(b->holdout.chosen, chosen);
  EXPECT_FALSE(b->holdout.agrees);
  EXPECT_FALSE(b->holdout.holds);
  EXPECT_TRUE(b->holdout.fails);
  EXPECT_EQ(b->holdout.verdict, "FAILS");
  EXPECT_GT(b->holdout.regret, 0.03);
  EXPECT_NE(b->verdict.find("decision hold-out FAILS"), std::string::npos) << b->verdict;
}

TEST(Advise, RefusesWhatTheSweepDoesNotSupportUnlessToldToExtrapolate) {
  const std::vector<LawPoint> points = Sweep(false, 4);
  AdviseOptions o = Options(8.64e18);  // 10x the largest run: 6 · 6e7 · 40 · 6e7
  o.bootstrap = 0;
  absl::StatusOr<Advice> a = Advise(points, o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("10x the largest compute run"), std::string::npos)
      << a.status();
  EXPECT_NE(a.status().message().find("--extrapolate"), std::string::npos);
  o.extrapolate = true;
  a = Advise(points, o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NE(a->extrapolation.find("10x the largest compute run"), std::string::npos)
      << a->extrapolation;
  EXPECT_NE(a->verdict.find("EXTRAPOLATED"), std::string::npos);
  // N_active outside the runs, and a context the sweep never ran.
  o = Options(3e17);
  o.bootstrap = 0;
  o.n_active = 1e9;
  a = Advise(points, o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("N_active = 1e+09 is outside"), std::string::npos)
      << a.status();
  o.n_active = 0;
  o.context = 4096;
  a = Advise(points, o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("ran T = 1024 only"), std::string::npos) << a.status();
  // Nothing to compare against.
  std::vector<LawPoint> sparse_only;
  for (const LawPoint& x : points) {
    if (!x.dense()) sparse_only.push_back(x);
  }
  a = Advise(sparse_only, Options(3e17));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("no dense runs"), std::string::npos);
}

TEST(Advise, AFixedActiveSizeIsKeptForEveryConfiguration) {
  AdviseOptions o = Options(6.0 * 2e7 * 20 * 2e7);  // 20 tokens per parameter at 2e7
  o.n_active = 2e7;
  o.bootstrap = 0;
  const absl::StatusOr<Advice> a = Advise(Sweep(false, 5), o);
  ASSERT_TRUE(a.ok()) << a.status();
  for (const ConfigurationAdvice& r : a->rows) {
    EXPECT_DOUBLE_EQ(r.n_active, 2e7);
    EXPECT_NEAR(r.tokens, 20 * 2e7, 1.0);
    EXPECT_FALSE(r.at_edge);
  }
}

// Dense and X-MoD runs at T = 512 and 1024 whose dense part carries a context
// factor (T/1024)^-kappa; with `interacting`, alpha also differs between the two
// contexts (0.34 at 1024, 0.30 at 512), which no single context term can follow.
std::vector<LawPoint> TwoContexts(double kappa, bool interacting, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<LawPoint> points;
  for (double t : {512.0, 1024.0}) {
    std::vector<double> truth = kConstantTruth;
    for (int k = 0; k < 3; ++k) truth[k] -= kappa * std::log(t / 1024.0);
    if (interacting && t == 512.0) truth[3] = 0.30;
    for (const auto& [scale, n] :
         std::vector<std::pair<std::string, double>>{{"s1", 2e6}, {"s2", 6e6}, {"s3", 2e7}}) {
      std::vector<LawPoint> at;
      for (double tpp : {10.0, 20.0, 40.0}) at.push_back(Point(n, tpp, 1, 1));
      for (double tpp : {10.0, 40.0}) at.push_back(Point(n, tpp, 0.5, 2));
      for (LawPoint x : at) {
        x.context = t;
        for (int s = 0; s < 2; ++s) {
          LawPoint y = x;
          y.scale = scale;
          y.loss = std::exp(XModLaw::LogLoss(truth.data(), x)) * std::exp(0.003 * normal(rng));
          y.config = absl::StrFormat("%s/%g/%g/%g", scale, x.d / x.n, x.capacity, t);
          y.id = absl::StrCat(y.config, "/", s);
          points.push_back(y);
        }
      }
    }
  }
  return points;
}

TEST(Advise, AContextTheSweepDidNotRunIsAnsweredByTheContextLawWhenExtrapolating) {
  const double kappa = 0.05;
  const std::vector<LawPoint> points = TwoContexts(kappa, false, 11);
  AdviseOptions o = Options(6.0 * 6e6 * 20 * 6e6);
  o.context = 2048;
  o.bootstrap = 20;
  o.holdout = false;
  absl::StatusOr<Advice> a = Advise(points, o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("T = 2048 was not run"), std::string::npos) << a.status();
  EXPECT_NE(a.status().message().find("--extrapolate"), std::string::npos);
  o.extrapolate = true;
  a = Advise(points, o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->context_from_law);
  EXPECT_NE(a->verdict.find("EXTRAPOLATED"), std::string::npos) << a->verdict;
  ASSERT_EQ(a->dense_forms.size(), 2u);
  EXPECT_TRUE(a->dense_forms[0].fitted && a->dense_forms[1].fitted) << a->dense_forms[1].error;
  EXPECT_NEAR(a->kappa, kappa, 0.01);
  EXPECT_LE(a->kappa_interval.low, a->kappa_interval.high);
  // The dense row's prediction at T = 2048 is the truth's there, within 1%.
  std::vector<double> truth = kConstantTruth;
  for (int k = 0; k < 3; ++k) truth[k] -= kappa * std::log(2.0);
  bool found = false;
  for (const ConfigurationAdvice& r : a->rows) {
    if (r.configuration.family != "dense") continue;
    found = true;
    LawPoint x = Point(r.n_active, r.tokens / r.n_active, 1, 1);
    x.context = 2048;
    EXPECT_NEAR(r.loss / std::exp(XModLaw::LogLoss(truth.data(), x)), 1.0, 0.01);
  }
  EXPECT_TRUE(found);
  // At a context it ran, the table uses the dense law fitted there.
  o.context = 1024;
  o.extrapolate = false;
  a = Advise(points, o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->context_from_law);
  EXPECT_TRUE(a->extrapolation.empty());
}

TEST(Advise, TheDenseFormsCompeteOnTheirInformationCriterion) {
  AdviseOptions o = Options(6.0 * 6e6 * 20 * 6e6);
  o.bootstrap = 0;
  o.holdout = false;
  // A context effect that changes alpha: the per-context reference wins and the
  // single context term is rejected by the replicates.
  absl::StatusOr<Advice> a = Advise(TwoContexts(0.05, true, 12), o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->dense_forms.size(), 2u);
  ASSERT_TRUE(a->dense_forms[0].fitted && a->dense_forms[1].fitted);
  EXPECT_LT(a->dense_forms[0].information.aic, a->dense_forms[1].information.aic);
  EXPECT_TRUE(a->dense_forms[1].lack_of_fit.available);
  EXPECT_TRUE(a->dense_forms[1].lack_of_fit.rejected) << a->dense_forms[1].lack_of_fit.p_value;
  // A pure context factor: the context term is not rejected.
  a = Advise(TwoContexts(0.05, false, 13), o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->dense_forms[1].fitted);
  EXPECT_FALSE(a->dense_forms[1].lack_of_fit.rejected) << a->dense_forms[1].lack_of_fit.p_value;
}

}  // namespace
}  // namespace xmod
