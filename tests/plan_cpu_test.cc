// The planner on this machine (docs/planner.md, "Validation"): six dense shapes
// trained by `xmod-train` on the CPU, in interleaved rounds; the cpu-2core
// profile calibrated on two of them predicts the step time of the other four
// within 20%.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "orchestrator/plan/calibrate.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/perf_model.h"
#include "tests/paths/paths.h"
#include "tests/process.h"

namespace xmod {
namespace {

using testing::CommandResult;

struct Shape {
  const char* name;
  int64_t d, layers, heads, context;
};
// Spread in width, depth, heads and context; a step of each takes 0.05-1 s here.
constexpr Shape kShapes[] = {
    {"s1", 64, 4, 2, 64},   {"s2", 128, 4, 4, 128}, {"s3", 96, 6, 3, 256},
    {"s4", 192, 2, 3, 128}, {"s5", 160, 4, 5, 512}, {"s6", 256, 4, 4, 256},
};
constexpr int kSteps = 8;
constexpr int64_t kBatchTokens = 2048;

class PlanCpu : public testing::TempDirTest {
 protected:
  // The one job of a dense sweep of this shape, as `xmod expand` resolves it.
  nlohmann::json Job(const Shape& s) {
    const std::string spec = Path(absl::StrCat(s.name, ".yaml"));
    std::ofstream(spec) << "name: cpu-" << s.name << "\n"
                        << "data: {synthetic: true, seed: 7, vocab_size: 256}\n"
                        << "family: dense\n"
                        << "scales:\n  " << s.name << ": {d_model: " << s.d
                        << ", n_heads: " << s.heads << ", n_layers: " << s.layers << "}\n"
                        << "grid:\n  scale: [" << s.name << "]\n  context: [" << s.context << "]\n"
                        << "budget:\n  tokens: " << kSteps * kBatchTokens << "\n"
                        << "train:\n  batch_tokens: " << kBatchTokens
                        << "\n  lr: 1.0e-3\n  warmup_steps: 1\n  eval_interval: 1000\n"
                        << "  eval_tokens: " << kBatchTokens << "\n  checkpoint_interval: 1000\n"
                        << "resources: {ranks: 1}\n"
                        << "design: {laws: []}\n";
    CommandResult r = Command(XMOD_BIN, {"expand", spec, "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    const nlohmann::json jobs = nlohmann::json::parse(r.out);
    EXPECT_EQ(jobs.size(), 1u);
    return jobs[0];
  }

  // Trains the job once; the median of its reported tokens/s after the first.
  double Measure(const nlohmann::json& job, int round) {
    const std::string id = job["id"];
    const std::string file = Path(id + ".json");
    std::ofstream(file) << job.dump();
    const std::string runs = Path(absl::StrCat("runs", round));
    CommandResult r =
        Command(XMOD_TRAIN_BIN, {"--job", file, "--run-dir", runs, "--threads", "2", "--quiet"});
    EXPECT_EQ(r.code, 0) << r.err;
    std::ifstream in(runs + "/" + id + "/metrics.jsonl");
    std::vector<double> rates;
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["name"] == "tokens_per_s" && j["step"].get<int64_t>() > 2) {
        rates.push_back(j["value"].get<double>());
      }
    }
    EXPECT_GE(rates.size(), 4u);
    std::sort(rates.begin(), rates.end());
    return rates.empty() ? 0.0 : rates[rates.size() / 2];
  }
};

// The planner's row for shape i, measured at `tokens_per_s`.
PlanRow Row(const Shape& s, const nlohmann::json& job, double tokens_per_s) {
  PlanRow row;
  row.where = s.name;
  row.name = s.name;
  row.model.style = BlockStyle::kXmod;
  ModelShape& m = row.model.shape;
  m.family = Family::kDense;
  m.d_model = s.d;
  m.n_layers = s.layers;
  m.n_heads = s.heads;
  m.d_ff = job["d_ff"].get<int64_t>();
  m.vocab_size = 256;
  m.context = s.context;
  Layout& l = row.layout;
  l.gpus = 1;
  l.gpus_per_node = 2;
  l.global_batch = job["batch_size"].get<int64_t>();
  l.micro_batch = job["micro_batch_size"].get<int64_t>();
  l.precision = Precision::kFp32;
  row.tokens_per_s = tokens_per_s;
  return row;
}

TEST_F(PlanCpu, CalibratedOnTwoShapesPredictsFourOthersWithinTwentyPercent) {
  auto cluster = LoadClusterProfile(std::string(XMOD_SOURCE_DIR) + "/clusters/cpu-2core.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<nlohmann::json> jobs;
  for (const Shape& s : kShapes) jobs.push_back(Job(s));
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PlanRow r = Row(kShapes[i], jobs[i], 1.0);
    ASSERT_TRUE(CheckLayout(r.model, r.layout).ok()) << r.name;
  }
  // Five rounds, alternating the order. This shared machine has fast and slow
  // spells (a whole round here once ran 40% faster than the next), so each round
  // is a calibration of its own: the profile fitted to the smallest and the
  // largest shape of that round predicts the other four of the same round, and a
  // shape's error is the median over rounds of predicted / measured.
  constexpr int kRounds = 5;
  std::map<std::string, std::vector<double>> ratios;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<double> measured(jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      const size_t i = round % 2 == 0 ? k : jobs.size() - 1 - k;
      measured[i] = Measure(jobs[i], round);
    }
    std::vector<PlanRow> rows;
    for (size_t i = 0; i < jobs.size(); ++i) rows.push_back(Row(kShapes[i], jobs[i], measured[i]));
    auto cal = Calibrate(*cluster, cluster->efficiency, {rows.front(), rows.back()});
    ASSERT_TRUE(cal.ok()) << cal.status();
    for (size_t i = 1; i + 1 < rows.size(); ++i) {
      const PlanRow& r = rows[i];
      const Prediction p = Predict(r.model, r.layout, *cluster, cal->efficiency);
      ratios[r.name].push_back(r.tokens_per_s / p.tokens_per_s);  // predicted / measured step
    }
  }
  for (size_t i = 1; i + 1 < jobs.size(); ++i) {
    const Shape& s = kShapes[i];
    std::vector<double> v = ratios[s.name];
    std::sort(v.begin(), v.end());
    const double median = v[v.size() / 2];
    std::printf("%s (d %ld, L %ld, T %ld): predicted / measured step %.3f (rounds %.3f .. %.3f)\n",
                s.name, static_cast<long>(s.d), static_cast<long>(s.layers),
                static_cast<long>(s.context), median, v.front(), v.back());
    EXPECT_NEAR(median, 1.0, 0.20) << s.name;
  }
}

}  // namespace
}  // namespace xmod
