#include "orchestrator/fit/fitter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace xmod {
namespace {

// The 245 Chinchilla runs of shared/data (Epoch AI's extraction); D = C / (6 N).
std::vector<LawPoint> Chinchilla(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string f; std::getline(hs, f, ',');) header.push_back(f);
  const auto col = [&](const std::string& name) {
    return std::find(header.begin(), header.end(), name) - header.begin();
  };
  const auto n_col = col("Model Size"), c_col = col("Training FLOP"), l_col = col("loss");
  std::vector<LawPoint> points;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    const double n = std::stod(f[n_col]), c = std::stod(f[c_col]);
    points.push_back({n, c / (6.0 * n), std::stod(f[l_col])});
  }
  return points;
}

// Epoch AI's refit (shared/data/README.md): dropping the 5 highest-loss runs,
// E = 1.8172, A = 477.8, B = 2143, alpha = 0.34731, beta = 0.36716, summed Huber
// objective 0.0010183.
TEST(DenseLaw, ReproducesEpochsChinchillaRefit) {
  const std::string path = std::string(XMOD_SOURCE_DIR) + "/../shared/data/chinchilla_svg_extracted.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  std::vector<LawPoint> points = Chinchilla(path);
  ASSERT_EQ(points.size(), 245u);
  std::sort(points.begin(), points.end(),
            [](const LawPoint& a, const LawPoint& b) { return a.loss < b.loss; });
  points.resize(points.size() - 5);
  const auto start = std::chrono::steady_clock::now();
  auto fit = FitDenseLaw(points);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(fit.ok()) << fit.status();
  std::printf("chinchilla: E %.5f A %.2f B %.1f alpha %.5f beta %.5f objective %.7f rmse %.5f "
              "(%d starts, %.2f s)\n",
              fit->params.at("E"), fit->params.at("A"), fit->params.at("B"),
              fit->params.at("alpha"), fit->params.at("beta"), fit->objective, fit->rmse,
              fit->starts, seconds);
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
      points.push_back({n, d, 1.7 + 400.0 / std::pow(n, 0.33) + 900.0 / std::pow(d, 0.3)});
    }
  }
  auto fit = FitDenseLaw(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->params.at("E"), 1.7, 1e-3);
  EXPECT_NEAR(fit->params.at("alpha"), 0.33, 1e-3);
  EXPECT_NEAR(fit->params.at("beta"), 0.3, 1e-3);
  EXPECT_LT(fit->rmse, 1e-6);
}

TEST(DenseLaw, TooFewOrDegeneratePointsAreClearErrors) {
  EXPECT_EQ(FitDenseLaw({{1e6, 1e8, 3.0}, {2e6, 2e8, 2.9}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<LawPoint> one_scale;
  for (double d : {1e8, 2e8, 4e8, 8e8, 1.6e9, 3.2e9}) one_scale.push_back({1e6, d, 3.0 - d * 1e-10});
  auto fit = FitDenseLaw(one_scale);
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(fit.status().message()).find("degenerate"), std::string::npos);
}

}  // namespace
}  // namespace xmod
