#include "orchestrator/fit/adaptive_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "Eigen/Dense"
#include "absl/strings/str_cat.h"
#include "orchestrator/fit/dense_law.h"

namespace xmod {
namespace {

const std::vector<double> kChinchilla = ChinchillaLaw();

double TrueLoss(double n, double d) {
  return std::exp(DenseLaw::LogLoss(kChinchilla.data(), DensePoint(n, d, 1.0)));
}

struct Grid {
  std::vector<OrderCandidate> jobs;
  double total = 0.0;
};
Grid FiveByFive() {
  Grid g;
  g.jobs = SyntheticDenseGrid();
  for (const OrderCandidate& c : g.jobs) g.total += c.cost;
  return g;
}

TEST(AdaptiveOrder, FallsBackToCheapestFirstUntilTheLawIsIdentifiable) {
  Grid g = FiveByFive();
  // Five points, one N: the law cannot be steered by yet.
  std::vector<LawPoint> points;
  for (double r : {5.0, 10.0, 20.0, 40.0, 80.0}) points.push_back(DensePoint(2e6, r * 2e6, 3.0));
  auto order = OrderByExpectedGain(points, g.jobs, DensePoint(128e6, 2.56e9, 0));
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_FALSE(order->adaptive);
  EXPECT_NE(order->why.find("too few points"), std::string::npos) << order->why;
  ASSERT_EQ(order->order.size(), g.jobs.size());
  std::vector<OrderCandidate> sorted = g.jobs;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.cost != b.cost ? a.cost < b.cost : a.id < b.id;
  });
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(order->order[i], sorted[i].id) << i;

  // Bad input is refused with the candidate named.
  g.jobs[3].cost = 0;
  auto bad = OrderByExpectedGain(points, g.jobs, DensePoint(128e6, 2.56e9, 0));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(g.jobs[3].id), std::string::npos);
  EXPECT_FALSE(OrderByExpectedGain(points, {}, DensePoint(0, 1, 0)).ok());
}

// The greedy sequence's gains equal the target variance recomputed from scratch
// after each pick (the rank-one updates are right), and a replicate of a point
// just picked is worth less than the point was.
TEST(AdaptiveOrder, GainsMatchTheVarianceRecomputedFromScratch) {
  Grid g = FiveByFive();
  std::vector<LawPoint> points;
  std::vector<OrderCandidate> pending;
  for (const OrderCandidate& c : g.jobs) {
    if (c.x.n <= 8e6) {
      points.push_back(DensePoint(c.x.n, c.x.d, TrueLoss(c.x.n, c.x.d)));
    } else {
      pending.push_back(c);
    }
  }
  OrderCandidate twin = pending.back();
  const std::string original = twin.id;
  twin.id += "-seed2";
  pending.push_back(twin);
  const LawPoint target = DensePoint(128e6, 2.56e9, 0);
  auto order = OrderByExpectedGain(points, pending, target);
  ASSERT_TRUE(order.ok()) << order.status();
  ASSERT_TRUE(order->adaptive) << order->why;
  ASSERT_EQ(order->order.size(), pending.size());
  // Exact data: the fit recovers the law.
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(order->fit.raw[k], kChinchilla[k], 1e-3) << k;

  auto grad = [&](const LawPoint& x) {
    using Jet = ceres::Jet<double, 5>;
    Jet q[5];
    for (int k = 0; k < 5; ++k) q[k] = Jet(order->fit.raw[k], k);
    return Eigen::Matrix<double, 5, 1>(DenseLaw::LogLoss(q, x).v);
  };
  Eigen::Matrix<double, 5, 5> info = Eigen::Matrix<double, 5, 5>::Zero();
  for (const LawPoint& x : points) info += grad(x) * grad(x).transpose();
  const double ridge = 1e-10 * info.trace() / 5;
  auto variance = [&](const Eigen::Matrix<double, 5, 5>& m) {
    Eigen::Matrix<double, 5, 5> r = m + Eigen::Matrix<double, 5, 5>::Identity() * ridge;
    return grad(target).dot(r.ldlt().solve(grad(target)));
  };
  double before = variance(info);
  EXPECT_NEAR(order->target_sd_over_sigma, std::sqrt(before), 1e-6 * std::sqrt(before));
  std::map<std::string, const OrderCandidate*> by_id;
  for (const OrderCandidate& c : pending) by_id[c.id] = &c;
  for (size_t i = 0; i < order->order.size(); ++i) {
    const Eigen::Matrix<double, 5, 1> j = grad(by_id[order->order[i]]->x);
    info += j * j.transpose();
    const double after = variance(info);
    EXPECT_NEAR(order->gain[i], (before - after) / before, 1e-6) << order->order[i];
    before = after;
  }
  const size_t first =
      std::find(order->order.begin(), order->order.end(), original) - order->order.begin();
  const size_t second =
      std::find(order->order.begin(), order->order.end(), twin.id) - order->order.begin();
  ASSERT_LT(first, order->order.size());
  ASSERT_LT(second, order->order.size());
  EXPECT_LT(order->gain[std::max(first, second)], order->gain[std::min(first, second)]);
}

// The acceptance test of the adaptive order: on synthetic Chinchilla losses with
// 0.5% seed noise (lognormal; the demo measures 0.3-1.0%), over 24 noise draws
// (the first 24 of bench/order_bench.cc), the law's prediction at 4x the largest
// scale (128M parameters, 20 tokens per parameter) gets within 2% of the truth
// and stays there after fewer FLOPs in the adaptive order than cheapest-first, on
// average and in the typical draw. docs/order.md gives the figures, with more
// draws and noise levels from the bench.
TEST(AdaptiveOrder, ReachesTheHoldOutErrorWithFewerFlopsThanCheapestFirst) {
  const Grid grid = FiveByFive();
  const LawPoint target = DensePoint(128e6, 20 * 128e6, 0);
  const double sigma = 0.005;
  // 12 seeded draws (they were 24): an ordering no better than cheapest-first puts
  // the ratio of means near 1 and wins near half, both far outside the bounds
  // below; 12 draws halve the test's time (27 s).
  const int draws = 12;
  std::vector<double> cheap_reach, adaptive_reach, ratios;
  const auto start = std::chrono::steady_clock::now();
  for (int draw = 0; draw < draws; ++draw) {
    std::mt19937_64 rng(5000 + draw);
    std::normal_distribution<double> noise(0.0, sigma);
    std::vector<double> observed;
    for (const OrderCandidate& c : grid.jobs) {
      observed.push_back(TrueLoss(c.x.n, c.x.d) * std::exp(noise(rng)));
    }
    FitOptions fit;
    fit.polish = 16;
    fit.threads = 1;
    const double truth = TrueLoss(target.n, target.d);
    auto cheap =
        SimulateOrder(grid.jobs, observed, SimulatedOrder::kCheapestFirst, target, truth, fit);
    auto adaptive =
        SimulateOrder(grid.jobs, observed, SimulatedOrder::kExpectedGain, target, truth, fit);
    ASSERT_TRUE(cheap.ok()) << cheap.status();
    ASSERT_TRUE(adaptive.ok()) << adaptive.status();
    // Cheapest-first is what it says.
    for (size_t i = 1; i < cheap->flops.size(); ++i) {
      ASSERT_GE(
          cheap->flops[i] - cheap->flops[i - 1],
          (i >= 2 ? cheap->flops[i - 1] - cheap->flops[i - 2] : cheap->flops[0]) * (1 - 1e-12));
    }
    const double rc = std::min(FlopsToReach(*cheap, 0.02), grid.total) / grid.total;
    const double ra = std::min(FlopsToReach(*adaptive, 0.02), grid.total) / grid.total;
    cheap_reach.push_back(rc);
    adaptive_reach.push_back(ra);
    ratios.push_back(ra / rc);
  }
  auto mean = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return 0.5 * (v[(v.size() - 1) / 2] + v[v.size() / 2]);
  };
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int wins = 0;
  for (size_t i = 0; i < ratios.size(); ++i) wins += adaptive_reach[i] < cheap_reach[i];
  std::printf(
      "hold-out error <= 2%% reached after (fraction of the sweep's FLOPs, %d draws):\n"
      "  cheapest-first mean %.3f median %.3f; adaptive mean %.3f median %.3f\n"
      "  adaptive/cheapest: ratio of means %.3f, median of per-draw ratios %.3f; adaptive "
      "earlier in %d of %d draws\n"
      "  %.1f s for %d simulated sweeps\n",
      draws, mean(cheap_reach), median(cheap_reach), mean(adaptive_reach), median(adaptive_reach),
      mean(adaptive_reach) / mean(cheap_reach), median(ratios), wins, draws, seconds, 2 * draws);
  EXPECT_LT(mean(adaptive_reach), 0.9 * mean(cheap_reach));
  EXPECT_LT(median(ratios), 0.8);
  EXPECT_GT(wins, draws / 2);
}

}  // namespace
}  // namespace xmod
