#include "orchestrator/fit/fitter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/accounting.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/gdn_law.h"
#include "orchestrator/fit/law_csv.h"
#include "orchestrator/fit/moe_law.h"
#include "orchestrator/fit/mol_law.h"
#include "orchestrator/fit/xmod_law.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

// Epoch AI's refit (tests/data/README.md): dropping the 5 highest-loss runs,
// E = 1.8172, A = 477.8, B = 2143, alpha = 0.34731, beta = 0.36716, summed Huber
// objective 0.0010183.
TEST(DenseLaw, ReproducesEpochsChinchillaRefit) {
  // tests/data holds the reference file, so this runs on any clone.
  const std::string path =
      std::string(XMOD_SOURCE_DIR) + "/tests/data/chinchilla_svg_extracted.csv";
  auto loaded = ReadChinchillaReference(path, 5);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<LawPoint>& points = *loaded;
  ASSERT_EQ(points.size(), 240u);  // 245 runs, the 5 highest-loss dropped
  const auto start = std::chrono::steady_clock::now();
  auto fit = FitLaw<DenseLaw>(points);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(fit.ok()) << fit.status();
  std::printf(
      "chinchilla: E %.5f A %.2f B %.1f alpha %.5f beta %.5f objective %.7f rmse %.5f "
      "(%d starts, %.2f s)\n",
      fit->params.at("E"), fit->params.at("A"), fit->params.at("B"), fit->params.at("alpha"),
      fit->params.at("beta"), fit->objective, fit->rmse, fit->starts, seconds);
  EXPECT_NEAR(fit->params.at("E"), 1.8172, 0.002 * 1.8172);
  EXPECT_NEAR(fit->params.at("alpha"), 0.34731, 0.005 * 0.34731);
  EXPECT_NEAR(fit->params.at("beta"), 0.36716, 0.005 * 0.36716);
  EXPECT_LE(fit->objective, 0.0010184);
  EXPECT_EQ(fit->n_points, 240);
  EXPECT_EQ(fit->starts, 5400);
}

TEST(DenseLaw, RecoversKnownParametersFromNoiselessPoints) {
  std::vector<LawPoint> points;
  for (double n : {1e6, 1e7, 1e8, 1e9, 1e10}) {
    for (double r : {5.0, 20.0, 80.0}) {
      const double d = r * n;
      points.push_back(
          DensePoint(n, d, 1.7 + 400.0 / std::pow(n, 0.33) + 900.0 / std::pow(d, 0.3)));
    }
  }
  auto fit = FitLaw<DenseLaw>(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->params.at("E"), 1.7, 1e-3);
  EXPECT_NEAR(fit->params.at("alpha"), 0.33, 1e-3);
  EXPECT_NEAR(fit->params.at("beta"), 0.3, 1e-3);
  EXPECT_LT(fit->rmse, 1e-6);
}

// Losses far from any floor: a power law in N and D and no E. The fitter drives
// e to -infinity; the report must say that E is not estimated (E->0), while a
// law with a real floor gets no such flag.
TEST(DenseLaw, AVanishedIrreducibleLossIsFlagged) {
  const auto points_with_floor = [](double e) {
    std::vector<LawPoint> points;
    for (double n : {1e4, 3e4, 1e5}) {
      for (double r : {20.0, 80.0, 320.0}) {
        const double d = r * n;
        points.push_back(DensePoint(n, d, e + 2.0 / std::pow(n, 0.1) + 12.0 / std::pow(d, 0.15)));
      }
    }
    return points;
  };
  AnalysisOptions options;
  options.law = "dense";
  auto fit = FitNamedLaw(points_with_floor(0.0), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_LT(fit->fit.params.at("E"), 1e-3);
  EXPECT_NE(std::find(fit->on_bound.begin(), fit->on_bound.end(), "E->0"), fit->on_bound.end());
  ASSERT_EQ(fit->dense.size(), 1u);
  EXPECT_EQ(fit->dense[0].on_bound, fit->on_bound);

  fit = FitNamedLaw(points_with_floor(1.2), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->fit.params.at("E"), 1.2, 1e-2);
  EXPECT_TRUE(fit->on_bound.empty()) << fit->on_bound.front();
  // Frozen, E is not reported even at zero's doorstep.
  options.fixed = {{"E", 1e-6}};
  fit = FitNamedLaw(points_with_floor(0.0), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(std::find(fit->on_bound.begin(), fit->on_bound.end(), "E->0"), fit->on_bound.end());
}

TEST(DenseLaw, TooFewOrDegeneratePointsAreClearErrors) {
  EXPECT_EQ(
      FitLaw<DenseLaw>({DensePoint(1e6, 1e8, 3.0), DensePoint(2e6, 2e8, 2.9)}).status().code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<LawPoint> one_scale;
  for (double d : {1e8, 2e8, 4e8, 8e8, 1.6e9, 3.2e9})
    one_scale.push_back(DensePoint(1e6, d, 3.0 - d * 1e-10));
  auto fit = FitLaw<DenseLaw>(one_scale);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(fit.status().message()).find("degenerate"), std::string::npos);
  // Eight points, but only four distinct (N, D): each measured at two contexts,
  // which the dense law does not read. Five parameters cannot be fitted.
  std::vector<LawPoint> repeated;
  for (double n : {1e6, 2e6}) {
    for (double r : {2.0, 6.0}) {
      for (double wobble : {1.0, 1.01}) repeated.push_back(DensePoint(n, r * n, 3.0 * wobble));
    }
  }
  fit = FitLaw<DenseLaw>(repeated);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(fit.status().message()).find("only 4 distinct inputs"), std::string::npos)
      << fit.status();
}

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

// Known X-MoD law parameters (the published Chinchilla dense law plus extras of a
// plausible size): internal order a, b, e, alpha, beta, eta, c_T, beta_T, c_s, psi.
std::vector<double> TrueXModParameters() {
  return {std::log(406.4), std::log(410.7), std::log(1.69), 0.34, 0.28, 0.35, 1.5, 0.4, 0.05, 0.8};
}

// Synthetic sweep: five FLOP-matched scales (sizes from the real accounting), three
// contexts, two token budgets, dense runs plus X-MoD runs at three capacities and
// three strides; loss from the law above times (1 + 0.005·N(0, 1)), seeded.
// `context_effect`: the dense model's own loss depends on T through
// E_T = E + context_effect·(256/T)^0.5 (a per-context dense law), as real
// losses do; the sparse runs carry the same dense reference at their T.
std::vector<LawPoint> SyntheticXModSweep(uint64_t seed, double noise = 0.005,
                                         double context_effect = 0.0) {
  struct Scale {
    const char* name;
    int64_t d, heads, layers;
  };
  const Scale scales[] = {{"s1", 256, 4, 4},
                          {"s2", 384, 6, 6},
                          {"s3", 512, 8, 8},
                          {"s4", 768, 12, 12},
                          {"s5", 1024, 16, 16}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<double> truth = TrueXModParameters();
  std::vector<LawPoint> points;
  for (const Scale& sc : scales) {
    for (int64_t t : {256, 1024, 4096}) {
      for (double tokens_per_param : {5.0, 20.0, 80.0}) {
        std::vector<std::pair<double, int64_t>> variants = {{1.0, 1}};
        for (double capacity : {0.125, 0.25, 0.5}) {
          for (int64_t stride : {2, 4, 8}) variants.push_back({capacity, stride});
        }
        for (auto [capacity, stride] : variants) {
          ModelShape shape;
          shape.family = stride == 1 ? Family::kDense : Family::kXmod;
          shape.d_model = sc.d;
          shape.n_heads = sc.heads;
          shape.n_layers = sc.layers;
          shape.d_ff = DefaultDff(sc.d);
          shape.vocab_size = 32000;
          shape.context = t;
          shape.stride = stride;
          shape.capacity = capacity;
          if (stride > 1) {
            const double target = ForwardFlopsPerToken(DenseReference(shape, sc.layers));
            shape.n_layers = LayersMatchingFlops(shape, target).value();
          }
          LawPoint x;
          x.scale = sc.name;
          x.n = static_cast<double>(ActiveParams(shape, sc.layers));
          x.n_total = static_cast<double>(CountParams(shape).non_embedding);
          x.d = tokens_per_param * x.n;
          x.context = static_cast<double>(t);
          x.capacity = stride == 1 ? 1.0 : EffectiveCapacity(shape);
          x.stride = static_cast<double>(stride);
          x.layers = static_cast<double>(shape.n_layers);
          std::vector<double> at_t = truth;
          at_t[2] = std::log(std::exp(truth[2]) + context_effect * std::sqrt(256.0 / t));
          x.loss = std::exp(XModLaw::LogLoss(at_t.data(), x)) * (1.0 + noise * normal(rng));
          points.push_back(x);
        }
      }
    }
  }
  return points;
}

AnalysisOptions XModOptions() {
  AnalysisOptions options;
  options.law = "xmod";
  return options;
}

TEST(XModLaw, NoiselessPointsGiveTheParametersBack) {
  auto fit = FitNamedLaw(SyntheticXModSweep(1, 0.0), XModOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  const std::vector<double> truth = TrueXModParameters();
  const std::vector<std::string> names = XModLaw::ParameterNames();
  for (size_t k = 0; k < truth.size(); ++k) {
    EXPECT_NEAR(fit->fit.raw[k], truth[k], 1e-3 * (1.0 + std::abs(truth[k]))) << names[k];
  }
  EXPECT_EQ(fit->method, "two-stage");
  ASSERT_EQ(fit->stages.size(), 2u);
  ASSERT_EQ(fit->dense.size(), 3u);  // one dense law per context
  for (const ContextFit& c : fit->dense) EXPECT_EQ(c.fit.n_points, 5 * 3);
  EXPECT_EQ(fit->stages[0].n_points, 5 * 3);          // the first context's dense runs
  EXPECT_EQ(fit->stages[1].n_points, 5 * 3 * 3 * 9);  // sparse runs
  EXPECT_EQ(fit->stages[1].starts, 405);
  EXPECT_LT(fit->fit.rmse, 1e-6);
}

// 0.5% noise. The tolerances are about 1.5 times the largest error seen over 20
// seeds of this generator (a study run while writing the test); the hold-out
// bound is the 1%, which the 20 seeds met with 0.0049-0.0089.
TEST(XModLaw, RecoversParametersFromNoisyPointsAndPredictsTheHeldOutScale) {
  const std::vector<LawPoint> points = SyntheticXModSweep(7);
  auto fit = FitNamedLaw(points, XModOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  const std::map<std::string, double>& p = fit->fit.params;
  EXPECT_NEAR(p.at("E"), 1.69, 0.06 * 1.69);
  EXPECT_NEAR(p.at("alpha"), 0.34, 0.035);
  EXPECT_NEAR(p.at("beta"), 0.28, 0.02);
  EXPECT_NEAR(p.at("eta"), 0.35, 0.06);
  EXPECT_NEAR(p.at("c_T"), 1.5, 0.3);
  EXPECT_NEAR(p.at("beta_T"), 0.4, 0.15);
  EXPECT_NEAR(p.at("c_s"), 0.05, 0.03);
  EXPECT_NEAR(p.at("psi"), 0.8, 0.2);
  EXPECT_NEAR(fit->fit.rmse, 0.005, 0.001);  // the noise itself

  AnalysisOptions options = XModOptions();
  options.holdout_largest = true;
  auto held = FitNamedLaw(points, options);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->holdout_scale, "s5");
  EXPECT_EQ(held->holdout.size(), 3u * 3u * 10u);
  EXPECT_EQ(held->points.size(), points.size() - held->holdout.size());
  EXPECT_LT(held->holdout_rmse, 0.01);
  // The stored report keeps every fitted point's prediction (the dashboard's
  // predicted-against-observed view reads them) beside the held-out ones.
  const nlohmann::json stored = ReportJson(*held);
  ASSERT_EQ(stored["fitted"].size(), held->points.size());
  for (size_t i = 0; i < held->points.size(); ++i) {
    const nlohmann::json& f = stored["fitted"][i];
    EXPECT_EQ(f["job_id"], held->points[i].id);
    EXPECT_DOUBLE_EQ(f["observed"].get<double>(), held->points[i].loss);
    EXPECT_DOUBLE_EQ(f["predicted"].get<double>(), *held->Predict(held->points[i]));
    EXPECT_NEAR(f["predicted"].get<double>(), held->points[i].loss, 0.03 * held->points[i].loss);
  }
  EXPECT_EQ(stored["holdout"]["points"].size(), held->holdout.size());
  std::printf(
      "xmod recovery: eta %.4f c_T %.4f beta_T %.4f c_s %.4f psi %.4f; "
      "held-out s5 RMSE %.5f (%.2f s, %.2f s)\n",
      p.at("eta"), p.at("c_T"), p.at("beta_T"), p.at("c_s"), p.at("psi"), held->holdout_rmse,
      fit->seconds, held->seconds);
}

// The dense loss depends on the context (E moves by 0.3 nats from T = 256 to
// 4096) and the sparse extras are known: the per-context dense reference absorbs
// the context effect, so the extras come back uncontaminated.
TEST(XModLaw, ADenseContextEffectDoesNotLeakIntoTheExtras) {
  const std::vector<LawPoint> points = SyntheticXModSweep(1, 0.0, 0.3);
  auto fit = FitNamedLaw(points, XModOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_EQ(fit->dense.size(), 3u);
  for (const ContextFit& c : fit->dense) {
    EXPECT_NEAR(c.fit.params.at("E"), 1.69 + 0.3 * std::sqrt(256.0 / c.context), 2e-3)
        << "T = " << c.context;
    EXPECT_NEAR(c.fit.params.at("alpha"), 0.34, 2e-3) << "T = " << c.context;
  }
  const std::vector<double> truth = TrueXModParameters();
  const std::vector<std::string> names = XModLaw::ParameterNames();
  for (int k = XModLaw::kDenseParameters; k < XModLaw::kParameters; ++k) {
    EXPECT_NEAR(fit->fit.raw[k], truth[k], 2e-3 * (1.0 + std::abs(truth[k]))) << names[k];
  }
  EXPECT_LT(fit->fit.rmse, 1e-5);
  // Every prediction uses the dense law of the point's own context.
  for (const LawPoint& x : points) {
    EXPECT_NEAR(fit->Predict(x).value(), x.loss, 1e-4 * x.loss);
  }
}

TEST(XModLaw, FixedParametersStayAndBoundsAreFlagged) {
  const std::vector<LawPoint> points = SyntheticXModSweep(2, 0.0);
  AnalysisOptions options = XModOptions();
  options.fixed = {{"beta_T", 0.5}, {"psi", 1.0}};
  auto fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fit.params.at("beta_T"), 0.5);
  EXPECT_EQ(fit->fit.params.at("psi"), 1.0);
  EXPECT_EQ(fit->fixed, (std::vector<std::string>{"beta_T", "psi"}));
  // A frozen value is never reported as "on a bound"; eta at its bound is.
  options.fixed = {{"eta", 1.0}};
  fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_TRUE(std::find(fit->on_bound.begin(), fit->on_bound.end(), "eta") == fit->on_bound.end());
  options.fixed = {{"gamma", 1.0}};
  EXPECT_EQ(FitNamedLaw(points, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.fixed = {{"eta", 2.0}};  // outside [0, 1]
  EXPECT_EQ(FitNamedLaw(points, options).status().code(), absl::StatusCode::kInvalidArgument);
  // Truth outside the bounds: the fit pins eta to 1 and says so.
  std::vector<LawPoint> beyond = points;
  for (LawPoint& x : beyond) {
    if (x.dense()) continue;
    std::vector<double> p = TrueXModParameters();
    p[5] = 1.6;
    x.loss = std::exp(XModLaw::LogLoss(p.data(), x));
  }
  fit = FitNamedLaw(beyond, XModOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fit.params.at("eta"), 1.0);
  EXPECT_TRUE(std::find(fit->on_bound.begin(), fit->on_bound.end(), "eta") != fit->on_bound.end());
}

// Replicates of one configuration are resampled together, and the noise summary
// reports their spread.
TEST(Bootstrap, ReplicatesMoveTogetherAndTheSeedSpreadIsReported) {
  std::vector<LawPoint> points;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double n : {1e6, 2e6, 4e6, 8e6}) {
    for (double r : {5.0, 20.0, 80.0}) {
      for (int seed = 0; seed < 2; ++seed) {
        const double d = r * n;
        LawPoint x = DensePoint(
            n, d,
            (1.8 + 400 / std::pow(n, 0.34) + 400 / std::pow(d, 0.28)) * (1.0 + 0.01 * normal(rng)));
        x.config = absl::StrCat(n, "/", r);
        x.se = 0.002 * x.loss;
        points.push_back(x);
      }
    }
  }
  AnalysisOptions options;
  options.bootstrap = 16;
  options.fit.threads = 2;
  auto fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->bootstrap_clusters, 12);  // configurations, not the 24 points
  EXPECT_EQ(fit->noise.configurations, 12);
  EXPECT_EQ(fit->noise.replicated, 12);
  EXPECT_GT(fit->noise.seed_sd, 0.002);
  EXPECT_LT(fit->noise.seed_sd, 0.03);
  EXPECT_NEAR(fit->noise.eval_se, 0.002, 1e-9);
  EXPECT_EQ(fit->bootstrap_used + fit->bootstrap_failed, 16);

  // Cooldown branches: the budgets of one trunk (one n here) are one resampled
  // cluster, while the seed spread is still taken within each budget.
  for (LawPoint& x : points) x.cluster = absl::StrCat("trunk/", x.n);
  fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->bootstrap_clusters, 4);  // trunks
  EXPECT_EQ(fit->noise.configurations, 12);
  EXPECT_LT(fit->noise.seed_sd, 0.03);
}

TEST(XModLaw, JointFitIsNoWorseThanTwoStages) {
  // The joint fit shares one dense law, so it takes one context.
  std::vector<LawPoint> points;
  for (const LawPoint& x : SyntheticXModSweep(3)) {
    if (x.context == 1024) points.push_back(x);
  }
  ASSERT_FALSE(points.empty());
  {
    AnalysisOptions options = XModOptions();
    options.joint = true;
    auto refused = FitNamedLaw(SyntheticXModSweep(3), options);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(std::string(refused.status().message()).find("per context"), std::string::npos)
        << refused.status();
  }
  auto two = FitNamedLaw(points, XModOptions());
  AnalysisOptions options = XModOptions();
  options.joint = true;
  auto joint = FitNamedLaw(points, options);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_TRUE(joint.ok()) << joint.status();
  EXPECT_EQ(joint->method, "joint");
  EXPECT_EQ(joint->fit.n_points, static_cast<int>(points.size()));
  EXPECT_LE(joint->fit.objective, two->fit.objective * (1 + 1e-9));
  EXPECT_NEAR(joint->fit.params.at("eta"), 0.35, 0.06);
}

TEST(Bootstrap, IntervalsAreSeededAndIndependentOfThreads) {
  const std::vector<LawPoint> points = SyntheticXModSweep(11);
  AnalysisOptions options = XModOptions();
  // 12 resamples (they were 24): enough to show seeding, thread independence and
  // an interval around the estimate; three fits of them are the test's time.
  options.bootstrap = 12;
  options.seed = 5;
  options.fit.threads = 1;
  auto one = FitNamedLaw(points, options);
  options.fit.threads = 2;
  auto two = FitNamedLaw(points, options);
  options.seed = 6;
  auto other = FitNamedLaw(points, options);
  ASSERT_TRUE(one.ok() && two.ok() && other.ok()) << one.status() << two.status();
  EXPECT_EQ(one->bootstrap_used, 12);
  ASSERT_EQ(one->intervals.size(), 10u);
  for (const auto& [name, iv] : one->intervals) {
    EXPECT_EQ(iv.low, two->intervals.at(name).low) << name;
    EXPECT_EQ(iv.high, two->intervals.at(name).high) << name;
    EXPECT_LT(iv.low, iv.high) << name;
  }
  EXPECT_NE(one->intervals.at("eta").low, other->intervals.at("eta").low);
  // The resamples scatter around the estimate, about as widely as the estimates of
  // the 20-seed study did (eta's error there: standard deviation 0.025).
  for (const char* name : {"eta", "alpha"}) {
    EXPECT_LE(one->intervals.at(name).low, one->fit.params.at(name)) << name;
    EXPECT_GE(one->intervals.at(name).high, one->fit.params.at(name)) << name;
  }
  const double width = one->intervals.at("eta").high - one->intervals.at("eta").low;
  EXPECT_GT(width, 0.02);
  EXPECT_LT(width, 0.3);
  // Every refit is kept whole: the interval is read off them, and each predicts.
  ASSERT_EQ(one->refits.size(), static_cast<size_t>(one->bootstrap_used));
  std::vector<double> etas;
  for (const BootstrapRefit& r : one->refits) {
    etas.push_back(r.params.at("eta"));
    EXPECT_EQ(r.raw.size(), one->fit.raw.size());
    ASSERT_EQ(r.dense_raw.size(), one->dense.size());
    EXPECT_EQ(r.dense_raw[0].second.size(), 5u);
  }
  EXPECT_LE(*std::min_element(etas.begin(), etas.end()), one->intervals.at("eta").low);
  EXPECT_GE(*std::max_element(etas.begin(), etas.end()), one->intervals.at("eta").high);
  const nlohmann::json json = ReportJson(*one);
  ASSERT_EQ(json.at("bootstrap_refits").size(), one->refits.size());
  EXPECT_EQ(json.at("bootstrap_refits")[0].at("params").at("eta").get<double>(), etas[0]);
  // Without noise every resample lands on the same parameters.
  auto exact = FitNamedLaw(SyntheticXModSweep(11, 0.0), options);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_LT(exact->intervals.at("eta").high - exact->intervals.at("eta").low, 1e-3);
  std::printf("bootstrap: eta %.4f [%.4f, %.4f], noiseless width %.2g\n", one->fit.params.at("eta"),
              one->intervals.at("eta").low, one->intervals.at("eta").high,
              exact->intervals.at("eta").high - exact->intervals.at("eta").low);
}

TEST(XModLaw, DegenerateDataAndBadOptionsAreClearErrors) {
  std::vector<LawPoint> points = SyntheticXModSweep(1);
  // Only stride 2: psi cannot be told from c_s.
  std::vector<LawPoint> one_stride;
  for (const LawPoint& x : points) {
    if (x.stride <= 2) one_stride.push_back(x);
  }
  auto fit = FitNamedLaw(one_stride, XModOptions());
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(fit.status().message()).find("stage 2"), std::string::npos) << fit.status();
  // Only dense runs.
  std::vector<LawPoint> dense;
  for (const LawPoint& x : points) {
    if (x.dense()) dense.push_back(x);
  }
  fit = FitNamedLaw(dense, XModOptions());
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(std::string(fit.status().message()).find("needs sparse runs"), std::string::npos)
      << fit.status();
  // One scale.
  std::vector<LawPoint> one_scale;
  for (const LawPoint& x : points) {
    if (x.scale == "s3") one_scale.push_back(x);
  }
  fit = FitNamedLaw(one_scale, XModOptions());
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(std::string(fit.status().message()).find("two distinct N"), std::string::npos)
      << fit.status();
  // Two scales cannot be held out of.
  std::vector<LawPoint> two_scales;
  for (const LawPoint& x : points) {
    if (x.scale == "s1" || x.scale == "s2") two_scales.push_back(x);
  }
  AnalysisOptions options = XModOptions();
  options.holdout_largest = true;
  fit = FitNamedLaw(two_scales, options);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(std::string(fit.status().message()).find("at least three"), std::string::npos);
  options = XModOptions();
  options.law = "chinchilla";
  EXPECT_EQ(FitNamedLaw(points, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.law = "dense";
  options.joint = true;
  EXPECT_EQ(FitNamedLaw(points, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Analysis, DenseLawReadsOnlyTheDenseRuns) {
  const std::vector<LawPoint> points = SyntheticXModSweep(1, 0.0);
  AnalysisOptions options;
  options.law = "dense";
  auto fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fit.n_points, 45);
  EXPECT_NEAR(fit->fit.params.at("E"), 1.69, 1e-3);
  EXPECT_NEAR(fit->fit.params.at("alpha"), 0.34, 1e-4);
}

TEST(Analysis, TheOrderOfThePointsDoesNotChangeTheFit) {
  std::vector<LawPoint> points = SyntheticXModSweep(4);
  auto a = FitNamedLaw(points, XModOptions());
  std::mt19937_64 rng(9);
  std::shuffle(points.begin(), points.end(), rng);
  auto b = FitNamedLaw(points, XModOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->fit.raw, b->fit.raw);
  EXPECT_EQ(a->fit.objective, b->fit.objective);
}

TEST(Analysis, ScalesAndHashes) {
  std::vector<LawPoint> points = {DensePoint(1e6, 1e8, 3.0), DensePoint(1.1e6, 2e8, 2.9),
                                  DensePoint(1e7, 1e9, 2.5), DensePoint(1.2e7, 2e9, 2.4)};
  std::string largest;
  const std::vector<std::string> labels = ScaleLabels(points, &largest);
  EXPECT_EQ(labels[0], labels[1]);
  EXPECT_EQ(labels[2], labels[3]);
  EXPECT_NE(labels[0], labels[2]);
  EXPECT_EQ(largest, labels[2]);
  std::vector<LawPoint> reversed(points.rbegin(), points.rend());
  EXPECT_EQ(PointsHash(points), PointsHash(reversed));
  points[3].loss = 2.41;
  EXPECT_NE(PointsHash(points), PointsHash(reversed));
}

// Known MoE law parameters, internal order a, b, e, alpha, beta, delta, gamma,
// omega, zeta: coefficients and dense exponents of the size Ludziejewski et al.
// 2025 report, with extras chosen so that more experts help (a synthetic truth,
// not their fit).
std::vector<double> TrueMoeParameters() {
  return {std::log(36.0), std::log(36.0), std::log(1.36), 0.19, 0.18, 0.2, -0.01, -0.5, -0.02};
}

// Five active sizes (named scales), three token budgets per size, dense runs
// (expansion 1) and MoE runs at expansions 2, 4, 8 and 16, two contexts with the
// same law; loss from the law times (1 + noise·N(0, 1)), seeded.
std::vector<LawPoint> SyntheticMoeSweep(uint64_t seed, double noise = 0.003) {
  const std::pair<const char*, double> scales[] = {
      {"m1", 2e7}, {"m2", 5e7}, {"m3", 1.2e8}, {"m4", 3e8}, {"m5", 7e8}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<double> truth = TrueMoeParameters();
  std::vector<LawPoint> points;
  for (const auto& [name, n] : scales) {
    for (double tokens_per_param : {5.0, 20.0, 80.0}) {
      for (double expansion : {1.0, 2.0, 4.0, 8.0, 16.0}) {
        LawPoint x;
        x.scale = name;
        x.n = n;
        x.n_total = n * (1.0 + 0.6 * (expansion - 1.0));  // experts are most of the weights
        x.d = tokens_per_param * n;
        x.context = 512;
        x.expansion = expansion;
        x.id = absl::StrCat(name, "/", tokens_per_param, "/", expansion);
        x.loss = std::exp(MoeLaw::LogLoss(truth.data(), x)) * (1.0 + noise * normal(rng));
        points.push_back(x);
      }
    }
  }
  return points;
}

AnalysisOptions MoeOptions() {
  AnalysisOptions options;
  options.law = "moe";
  return options;
}

TEST(MoeLaw, IsTheDenseLawAtExpansionOne) {
  const std::vector<double> p = TrueMoeParameters();
  LawPoint x = DensePoint(1e8, 2e9, 1.0);
  EXPECT_DOUBLE_EQ(MoeLaw::LogLoss(p.data(), x), DenseLaw::LogLoss(p.data(), x));
  // Ê > 1 moves the loss by the extras, by hand: A·Ê^δ·N^−(α − γ lnÊ) + ...
  x.expansion = 8.0;
  const double le = std::log(8.0);
  const double by_hand = 36.0 * std::pow(8.0, 0.2) * std::pow(1e8, -(0.19 + 0.01 * le)) +
                         36.0 * std::pow(8.0, -0.5) * std::pow(2e9, -(0.18 + 0.02 * le)) + 1.36;
  EXPECT_NEAR(std::exp(MoeLaw::LogLoss(p.data(), x)), by_hand, 1e-12 * by_hand);
  EXPECT_LT(by_hand, std::exp(DenseLaw::LogLoss(p.data(), x)));  // the experts help here
}

TEST(MoeLaw, NoiselessPointsGiveTheParametersBack) {
  auto fit = FitNamedLaw(SyntheticMoeSweep(1, 0.0), MoeOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  const std::vector<double> truth = TrueMoeParameters();
  const std::vector<std::string> names = MoeLaw::ParameterNames();
  for (size_t k = 0; k < truth.size(); ++k) {
    EXPECT_NEAR(fit->fit.raw[k], truth[k], 1e-3 * (1.0 + std::abs(truth[k]))) << names[k];
  }
  EXPECT_EQ(fit->method, "two-stage");
  ASSERT_EQ(fit->stages.size(), 2u);
  EXPECT_EQ(fit->stages[0].n_points, 5 * 3);      // dense runs
  EXPECT_EQ(fit->stages[1].n_points, 5 * 3 * 4);  // MoE runs
  EXPECT_EQ(fit->stages[1].starts, 81);
  EXPECT_LT(fit->fit.rmse, 1e-6);
  EXPECT_TRUE(fit->on_bound.empty()) << fit->on_bound.size();
  // The reported names.
  for (const char* name : {"A", "B", "E", "alpha", "beta", "delta", "gamma", "omega", "zeta"}) {
    EXPECT_EQ(fit->fit.params.count(name), 1u) << name;
  }
  EXPECT_NEAR(fit->fit.params.at("omega"), -0.5, 1e-3);
}

// 0.3% noise. The four extras come in correlated pairs (delta with gamma, omega
// with zeta), so each alone is uncertain: over 20 seeds of this generator (a study
// run while writing the test) omega's error reached 0.56 and zeta's 0.032, while
// the law's predictions stayed close: the held-out largest scale within 0.36-1.12%
// RMSE. The bounds below are about 1.3 times the worst of the study; the intervals
// must be wide where the study found the estimates loose.
TEST(MoeLaw, NoisyPointsPredictTheHeldOutScaleWithIntervals) {
  const std::vector<LawPoint> points = SyntheticMoeSweep(7);
  const std::vector<LawPoint> truth = SyntheticMoeSweep(7, 0.0);
  AnalysisOptions options = MoeOptions();
  options.bootstrap = 16;
  options.seed = 3;
  auto fit = FitNamedLaw(points, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  // The fitted law against the noiseless losses at every point.
  double squares = 0.0;
  for (const LawPoint& x : truth) {
    auto predicted = fit->Predict(x);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    squares += std::pow(std::log(*predicted / x.loss), 2);
  }
  const double law_error = std::sqrt(squares / static_cast<double>(truth.size()));
  EXPECT_LT(law_error, 0.0025);  // the noise is 0.003 per point; this seed: 0.0019
  const auto& p = fit->fit.params;
  EXPECT_NEAR(p.at("omega"), -0.5, 0.75);
  EXPECT_NEAR(p.at("zeta"), -0.02, 0.042);
  EXPECT_NEAR(p.at("delta"), 0.2, 0.15);
  EXPECT_NEAR(fit->fit.rmse, 0.003, 0.001);
  ASSERT_EQ(fit->intervals.size(), 9u);
  EXPECT_GE(fit->bootstrap_used, 14);
  for (const auto& [name, iv] : fit->intervals) {
    EXPECT_LE(iv.low, p.at(name)) << name;
    EXPECT_GE(iv.high, p.at(name)) << name;
  }
  EXPECT_GT(fit->intervals.at("omega").high - fit->intervals.at("omega").low, 0.2);

  options.bootstrap = 0;
  options.holdout_largest = true;
  auto held = FitNamedLaw(points, options);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->holdout_scale, "m5");
  EXPECT_EQ(held->holdout.size(), 15u);
  EXPECT_LT(held->holdout_rmse, 0.015);
  std::printf(
      "moe recovery: delta %.4f gamma %.4f omega %.4f [%.3f, %.3f] zeta %.4f; law error "
      "%.5f; held-out m5 RMSE %.5f (%.2f s)\n",
      p.at("delta"), p.at("gamma"), p.at("omega"), fit->intervals.at("omega").low,
      fit->intervals.at("omega").high, p.at("zeta"), law_error, held->holdout_rmse, fit->seconds);
}

TEST(MoeLaw, JointFitIsNoWorseAndFixedParametersStay) {
  const std::vector<LawPoint> points = SyntheticMoeSweep(5);
  auto two = FitNamedLaw(points, MoeOptions());
  AnalysisOptions options = MoeOptions();
  options.joint = true;
  auto joint = FitNamedLaw(points, options);
  ASSERT_TRUE(two.ok() && joint.ok()) << two.status() << joint.status();
  EXPECT_EQ(joint->method, "joint");
  EXPECT_LE(joint->fit.objective, two->fit.objective * (1 + 1e-9));
  options = MoeOptions();
  options.fixed = {{"gamma", 0.0}, {"E", 1.4}};
  auto fixed = FitNamedLaw(points, options);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->fit.params.at("gamma"), 0.0);
  EXPECT_NEAR(fixed->fit.params.at("E"), 1.4, 1e-12);
  options.fixed = {{"eta", 0.5}};  // an X-MoD parameter
  auto wrong = FitNamedLaw(points, options);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(std::string(wrong.status().message()).find("law moe has no parameter 'eta'"),
            std::string::npos)
      << wrong.status();
}

TEST(MoeLaw, ReadsOnlyDenseAndMoeRunsAndRefusesDegenerateData) {
  std::vector<LawPoint> points = SyntheticMoeSweep(2, 0.0);
  // An X-MoD run among them is not a point of the moe law (nor a MoE run of xmod's).
  LawPoint routed = DensePoint(1e8, 2e9, 9.0);
  routed.stride = 2;
  routed.capacity = 0.25;
  routed.context = 512;
  routed.n_total = 2e8;
  points.push_back(routed);
  auto fit = FitNamedLaw(points, MoeOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->fit.n_points, 75);
  EXPECT_LT(fit->fit.rmse, 1e-6);
  // Only dense runs.
  std::vector<LawPoint> dense, one_size, no_dense;
  for (const LawPoint& x : SyntheticMoeSweep(2)) {
    if (x.expansion == 1.0) dense.push_back(x);
    if (x.expansion == 1.0 || x.scale == "m3") one_size.push_back(x);
    if (x.expansion > 1.0) no_dense.push_back(x);
  }
  auto refused = FitNamedLaw(dense, MoeOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("needs MoE runs"), std::string::npos)
      << refused.status();
  refused = FitNamedLaw(one_size, MoeOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("two or more active sizes"),
            std::string::npos)
      << refused.status();
  refused = FitNamedLaw(no_dense, MoeOptions());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("baselines: [dense]"), std::string::npos)
      << refused.status();
  // The xmod law does not read MoE runs: with them only, it has no sparse runs.
  AnalysisOptions xmod;
  xmod.law = "xmod";
  refused = FitNamedLaw(SyntheticMoeSweep(2), xmod);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("needs sparse runs"), std::string::npos)
      << refused.status();
}

TEST(MoeLaw, ReadsALawCsvWithAnExpansionColumn) {
  const std::string path = ::testing::TempDir() + "/moe_points.csv";
  {
    std::ofstream out(path);
    out << "N_active,D,expansion,loss,scale\n";
    for (const LawPoint& x : SyntheticMoeSweep(1, 0.0)) {
      out << absl::StrFormat("%.17g,%.17g,%.17g,%.17g,%s\n", x.n, x.d, x.expansion, x.loss,
                             x.scale);
    }
  }
  auto points = ReadLawCsv(path, "moe");
  ASSERT_TRUE(points.ok()) << points.status();
  auto fit = FitNamedLaw(*points, MoeOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->fit.params.at("delta"), 0.2, 1e-3);
  {
    std::ofstream out(path);
    out << "N_active,D,loss\n1e8,2e9,3.1\n";
  }
  auto missing = ReadLawCsv(path, "moe");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("missing column 'expansion'"),
            std::string::npos)
      << missing.status();
  {
    std::ofstream out(path);
    out << "N_active,D,expansion,loss\n1e8,2e9,0.5,3.1\n";
  }
  auto below = ReadLawCsv(path, "moe");
  ASSERT_FALSE(below.ok());
  EXPECT_NE(std::string(below.status().message()).find(":2: expansion"), std::string::npos)
      << below.status();
}

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

// The laws of issue 33 on points made from known parameters: five sizes, three
// budgets per size, dense runs and, for the mol law, MoL runs at block expansions
// 2 and 4 (N_total growing with the idle blocks); for the gdn law, gdn runs at
// DeltaNet shares 0.5 and 1 (10% more parameters than their dense partner).
std::vector<double> TrueArchitectureParameters(double extra1, double extra2) {
  return {std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, extra1, extra2};
}

template <typename Law>
std::vector<LawPoint> SyntheticArchitectureSweep(const std::vector<double>& truth, bool mol) {
  std::vector<LawPoint> points;
  const std::pair<const char*, double> scales[] = {
      {"m1", 2e7}, {"m2", 5e7}, {"m3", 1.2e8}, {"m4", 3e8}, {"m5", 7e8}};
  for (const auto& [name, n] : scales) {
    for (double tokens_per_param : {5.0, 20.0, 80.0}) {
      for (double v : {0.0, 1.0, 2.0}) {
        LawPoint x;
        x.scale = name;
        x.context = 512;
        x.n = v == 0.0 || mol ? n : 1.1 * n;
        x.d = tokens_per_param * n;
        if (v > 0.0 && mol) {
          x.block_expansion = 2.0 * v;  // 2 and 4
          x.n_total = n * (1.0 + 0.5 * x.block_expansion);
        } else if (v > 0.0) {
          x.deltanet_share = 0.5 * v;  // 0.5 and 1
        }
        x.id = absl::StrCat(name, "/", tokens_per_param, "/", v);
        x.loss = std::exp(Law::LogLoss(truth.data(), x));
        points.push_back(x);
      }
    }
  }
  return points;
}

TEST(MolLaw, NoiselessPointsGiveEtaAndCmBack) {
  const std::vector<double> truth = TrueArchitectureParameters(0.3, 0.05);
  AnalysisOptions options;
  options.law = "mol";
  auto fit = FitNamedLaw(SyntheticArchitectureSweep<MolLaw>(truth, true), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->method, "two-stage");
  ASSERT_EQ(fit->stages.size(), 2u);
  EXPECT_EQ(fit->stages[1].n_points, 5 * 3 * 2);
  EXPECT_NEAR(fit->fit.params.at("eta"), 0.3, 1e-3);
  EXPECT_NEAR(fit->fit.params.at("c_m"), 0.05, 1e-4);
  EXPECT_LT(fit->fit.rmse, 1e-6);
  // A dense point is the dense law; a MoL point at Ê_b = 1 is not dense.
  LawPoint x = DensePoint(1e8, 2e9, 1.0);
  EXPECT_DOUBLE_EQ(MolLaw::LogLoss(truth.data(), x), DenseLaw::LogLoss(truth.data(), x));
  x.block_expansion = 1.0;
  EXPECT_FALSE(x.dense());
  EXPECT_NEAR(std::exp(MolLaw::LogLoss(truth.data(), x)),
              std::exp(DenseLaw::LogLoss(truth.data(), DensePoint(1e8, 2e9, 1.0))) + 0.05, 1e-9);
}

TEST(GdnLaw, NoiselessPointsGiveCgBackAtItsOwnSize) {
  const std::vector<double> truth = {
      std::log(400.0), std::log(410.0), std::log(1.7), 0.34, 0.28, -0.04};
  AnalysisOptions options;
  options.law = "gdn";
  auto fit = FitNamedLaw(SyntheticArchitectureSweep<GdnLaw>(truth, false), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->stages[1].n_points, 5 * 3 * 2);
  EXPECT_NEAR(fit->fit.params.at("c_g"), -0.04, 1e-4);
  EXPECT_LT(fit->fit.rmse, 1e-6);
  // Half the charge at a share of one half.
  LawPoint x = DensePoint(1e8, 2e9, 1.0);
  const double dense = std::exp(GdnLaw::LogLoss(truth.data(), x));
  x.deltanet_share = 0.5;
  EXPECT_NEAR(std::exp(GdnLaw::LogLoss(truth.data(), x)), dense - 0.02, 1e-9);
}

}  // namespace
}  // namespace xmod
