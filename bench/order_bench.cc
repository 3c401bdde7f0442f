// The law-driven order against cheapest-first on synthetic sweeps (docs/order.md):
// the 5 x 5 dense grid of SyntheticDenseGrid with losses from Chinchilla's law
// times lognormal seed noise, at several noise levels, many noise draws each. For
// every draw the same losses are trained in three orders: cheapest-first, the
// shipped expected-gain rule, and the "least certain per FLOP" width rule. After
// each job the dense law is refitted and its prediction at 4x the largest scale
// (128M parameters, 20 tokens per parameter) compared with the truth.
//
// Prints, per noise level: the fraction of the sweep's FLOPs after which the
// prediction stays within the tolerance (mean and median over draws), each rule's
// ratio to cheapest-first (ratio of means; median of the per-draw ratios, which
// pair the three orders on the same losses) with a bootstrap interval, how often
// it got there first, and the median error after 10%, 20% and 30% of the FLOPs. Exits 1 when the
// expected-gain rule does not beat cheapest-first at 0.5% noise. Run: build/bin/order_bench
// [--draws N] [--tolerance 0.02] [--sigma 0.005]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/paired_ratio.h"
#include "orchestrator/fit/adaptive_order.h"
#include "orchestrator/fit/dense_law.h"

namespace xmod {
namespace {

int Main(int argc, char** argv) {
  int draws = 24;
  double tolerance = 0.02;
  std::vector<double> sigmas = {0.0025, 0.005, 0.01};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--draws") == 0) {
      draws = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--tolerance") == 0) {
      tolerance = std::atof(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--sigma") == 0) {
      sigmas = {std::atof(argv[i + 1])};
    } else {
      std::fprintf(stderr, "usage: order_bench [--draws N] [--tolerance T] [--sigma S]\n");
      return 2;
    }
  }
  if (draws < 1 || !(tolerance > 0)) {
    std::fprintf(stderr, "order_bench: --draws must be >= 1 and --tolerance > 0\n");
    return 2;
  }
  const std::vector<OrderCandidate> jobs = SyntheticDenseGrid();
  const std::vector<double> law = ChinchillaLaw();
  auto truth = [&](const LawPoint& x) { return std::exp(DenseLaw::LogLoss(law.data(), x)); };
  double total = 0.0;
  for (const OrderCandidate& c : jobs) total += c.cost;
  const LawPoint target = DensePoint(128e6, 20 * 128e6, 0.0);
  FitOptions fit;
  fit.threads = 1;
  fit.polish = 16;
  const SimulatedOrder rules[] = {SimulatedOrder::kCheapestFirst, SimulatedOrder::kExpectedGain,
                                  SimulatedOrder::kWidth};
  const char* names[] = {"cheapest-first", "expected gain", "width per FLOP"};
  bool gain_wins = true;
  std::printf("hold-out: the law's loss at N = 128M, D = 2.56B within %.1f%% of the truth\n",
              100 * tolerance);
  for (double sigma : sigmas) {
    std::vector<double> reach[3];
    std::vector<double> err_at[3][3];  // rule x (10%, 20%, 30% of the FLOPs)
    for (int draw = 0; draw < draws; ++draw) {
      std::mt19937_64 rng(5000 + draw);
      std::normal_distribution<double> noise(0.0, sigma);
      std::vector<double> observed;
      for (const OrderCandidate& c : jobs) observed.push_back(truth(c.x) * std::exp(noise(rng)));
      for (int r = 0; r < 3; ++r) {
        auto trace = SimulateOrder(jobs, observed, rules[r], target, truth(target), fit);
        if (!trace.ok()) {
          std::fprintf(stderr, "order_bench: %s\n", std::string(trace.status().message()).c_str());
          return 1;
        }
        reach[r].push_back(std::min(FlopsToReach(*trace, tolerance), total) / total);
        for (int f = 0; f < 3; ++f) {
          double e = 1.0;
          for (size_t i = 0; i < trace->flops.size() && trace->flops[i] <= 0.1 * (f + 1) * total;
               ++i) {
            e = trace->error[i];
          }
          err_at[r][f].push_back(e);
        }
      }
    }
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s / v.size();
    };
    // A 90% percentile interval of the ratio of means over draws resampled with
    // replacement (the draws are what varies from one sweep to the next).
    auto interval = [&](const std::vector<double>& a, const std::vector<double>& b) {
      std::mt19937_64 rng(17);
      std::uniform_int_distribution<int> pick(0, draws - 1);
      std::vector<double> ratios;
      for (int k = 0; k < 2000; ++k) {
        double sa = 0, sb = 0;
        for (int d = 0; d < draws; ++d) {
          const int i = pick(rng);
          sa += a[i];
          sb += b[i];
        }
        ratios.push_back(sa / sb);
      }
      std::sort(ratios.begin(), ratios.end());
      return std::make_pair(ratios[100], ratios[1899]);
    };
    std::printf("\nseed noise %.2f%% (%d draws): FLOP fraction to reach the tolerance\n",
                100 * sigma, draws);
    for (int r = 0; r < 3; ++r) {
      int first = 0;
      for (int d = 0; d < draws; ++d) first += reach[r][d] < reach[0][d];
      const bench::PairedRatio paired = bench::Paired(reach[r], reach[0]);
      const auto [low, high] = interval(reach[r], reach[0]);
      std::printf(
          "  %-15s mean %.3f median %.3f | vs cheapest: ratio of means %.3f (90%% %.3f-%.3f), "
          "median per-draw ratio %.3f, earlier in %d/%d | median error at 10/20/30%%: %.4f "
          "%.4f %.4f\n",
          names[r], mean(reach[r]), bench::Median(reach[r]), mean(reach[r]) / mean(reach[0]), low,
          high, paired.median, first, draws, bench::Median(err_at[r][0]),
          bench::Median(err_at[r][1]), bench::Median(err_at[r][2]));
    }
    if (std::abs(sigma - 0.005) < 1e-12 && !(mean(reach[1]) < mean(reach[0]))) gain_wins = false;
  }
  return gain_wins ? 0 : 1;
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) { return xmod::Main(argc, argv); }
