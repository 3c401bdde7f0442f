// The decision hold-out (advise.h, DecisionHoldout) on simulated sweeps whose
// truth is known: can it catch a wrong pick? The sweeps are FLOP-matched as
// `match: training_flops` runs them (each X-MoD configuration's N_active a few
// percent off the dense model's, so one budget's runs differ in tokens per
// parameter by up to 25%), and one configuration's advantage fades with scale in a
// way the X-MoD law cannot follow, so that advise, fitted to every scale, often
// picks it at the largest compute although another is better there. A hold-out
// that compared runs of equal tokens per parameter within 10% (as it did) split
// the budget and compared dense with one configuration; a hold-out that said
// "holds" within two seed sds missed most wrong picks (27 of 30 in the review).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/advise_test_util.h"
#include "orchestrator/fit/xmod_law.h"

namespace xmod {
namespace {

constexpr double kContext = 1024;
const std::vector<double> kTruth = {
    std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, 0.8, 3.0, 0.5, 0.08, 1.0};
struct Sparse {
  double capacity, stride, n_ratio;  // n_ratio: its N_active over the dense model's
};
const std::vector<Sparse> kSparse = {
    {0.5, 2, 0.92}, {0.5, 4, 1.08}, {0.125, 2, 0.95}, {0.125, 4, 1.05}};
const double kSmallest = 2e6, kLargest = 6e7;
// The configuration whose advantage fades: the truth's best at the test's compute
// without the fade; `kFade`: its loss grows by this share per e-fold of N_active.
const char* kFading = "xmod sparsity=0.5 stride=2";
constexpr double kFade = 0.004;

LawPoint Point(double n, double d, double capacity, double stride) {
  return advise_test::XModRun(n, d, capacity, stride, kContext);
}

std::string Name(const LawPoint& x) {
  return x.dense() ? "dense"
                   : absl::StrFormat("xmod sparsity=%g stride=%g", 1 - x.capacity, x.stride);
}

double TrueLoss(const LawPoint& x) {
  const double loss = std::exp(XModLaw::LogLoss(kTruth.data(), x));
  return Name(x) == kFading ? loss * (1.0 + kFade * std::log(x.n / kSmallest)) : loss;
}

// Four scales over 1.5 decades; dense at 10, 20 and 40 tokens per parameter, each
// X-MoD configuration at the compute of dense's 10 and 40; two seeds; 0.3% noise.
std::vector<LawPoint> Sweep(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.003);
  std::vector<LawPoint> points;
  auto add = [&](const std::string& scale, const LawPoint& x) {
    for (int s = 0; s < 2; ++s) {
      LawPoint y = x;
      y.scale = scale;
      y.loss = TrueLoss(x) * std::exp(normal(rng));
      y.config = absl::StrFormat("%s/%g/%s", scale, 6 * x.n * x.d, Name(x));
      points.push_back(y);
    }
  };
  int k = 0;
  for (double n : {kSmallest, 6e6, 2e7, kLargest}) {
    const std::string scale = absl::StrFormat("s%d", ++k);
    for (double tpp : {10.0, 20.0, 40.0}) add(scale, Point(n, tpp * n, 1, 1));
    for (const Sparse& c : kSparse) {
      for (double tpp : {10.0, 40.0}) {
        const double n_active = c.n_ratio * n;
        add(scale, Point(n_active, tpp * n * n / n_active, c.capacity, c.stride));
      }
    }
  }
  return points;
}

// The truly best configuration at compute C, searched as advise searches each
// configuration (inside its own runs' N_active and tokens per parameter).
std::string TrueBest(double compute) {
  std::string best;
  double lowest = 1e300;
  std::vector<Sparse> all = kSparse;
  all.push_back({1, 1, 1});
  for (const Sparse& c : all) {
    for (int i = 0; i <= 400; ++i) {
      const double n =
          c.n_ratio * std::exp(std::log(kSmallest) + std::log(kLargest / kSmallest) * i / 400);
      const double tpp = compute / (6 * n) / n;
      const double r2 = c.n_ratio * c.n_ratio;
      if (tpp < 10 / r2 * 0.999 || tpp > 40 / r2 * 1.001) continue;
      const LawPoint x = Point(n, tpp * n, c.capacity, c.stride);
      if (TrueLoss(x) < lowest) {
        lowest = TrueLoss(x);
        best = Name(x);
      }
    }
  }
  return best;
}

TEST(DecisionHoldout, CatchesMostWrongPicksOnFlopMatchedSweeps) {
  const double compute = 6.0 * kLargest * 10 * kLargest;  // the largest scale's smaller budget
  const std::string truth = TrueBest(compute);
  ASSERT_NE(truth, kFading);
  AdviseOptions o;
  o.compute = compute;
  o.context = kContext;
  o.bootstrap = 0;  // the pick is the lowest predicted loss; no refits needed
  o.forms = {"xmod"};
  int wrong = 0, caught = 0, right = 0, alarms = 0;
  // 8 sweeps: the scenario makes advise pick wrong in nearly all; a hold-out that
  // confirmed wrong picks as often as the old one (27 of 30) fails the bound.
  const int kSweeps = 8;
  for (int s = 0; s < kSweeps; ++s) {
    const absl::StatusOr<Advice> a = Advise(Sweep(100 + s), o);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(a->holdout.available) << a->holdout.why;
    // Every configuration run at the held-out budget is compared.
    EXPECT_EQ(a->holdout.rows.size(), 5u);
    EXPECT_EQ(a->holdout.scale, "s4");
    EXPECT_EQ(a->holdout.dense_scales, 3);
    const bool is_wrong = a->rows.front().configuration.name != truth;
    wrong += is_wrong;
    right += !is_wrong;
    caught += is_wrong && !a->holdout.holds;
    alarms += !is_wrong && !a->holdout.holds;
  }
  std::printf(
      "decision hold-out: advise picked wrong in %d of %d sweeps, the hold-out did not confirm "
      "%d of them; of the %d right picks it did not confirm %d\n",
      wrong, kSweeps, caught, right, alarms);
  ASSERT_GE(wrong, 5) << "the scenario should make advise pick wrong in most sweeps";
  EXPECT_GE(caught, 0.7 * wrong);
}

TEST(DecisionHoldout, SaysNoneIsPossibleWithFewerThanThreeScalesLeft) {
  std::vector<LawPoint> points;
  for (const LawPoint& x : Sweep(7)) {
    if (x.scale != "s1") points.push_back(x);  // three scales: two left below s4
  }
  AdviseOptions o;
  o.compute = 6.0 * kLargest * 10 * kLargest;
  o.context = kContext;
  o.bootstrap = 0;
  const absl::StatusOr<Advice> a = Advise(points, o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->holdout.available);
  EXPECT_NE(a->holdout.why.find("2 scales left; a refit needs at least 3"), std::string::npos)
      << a->holdout.why;
  EXPECT_NE(a->verdict.find("no decision hold-out"), std::string::npos) << a->verdict;
}

}  // namespace
}  // namespace xmod
