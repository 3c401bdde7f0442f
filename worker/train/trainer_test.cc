#include "worker/train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

namespace xmod {
namespace {

// Golden validation loss of the tiny X-MoD job after 80 steps, recorded on CPU with
// Debian's LibTorch 1.13 and OpenBLAS: 1.339806 (val_loss_causal 1.348422); the
// uniform loss is log 64 = 4.159 and a bigram model's floor is log 4 = 1.386, so
// the band below also proves that the model uses context.
constexpr double kGoldenValLossLow = 1.31;
constexpr double kGoldenValLossHigh = 1.37;

TrainJob TinyJob(Family family, int64_t steps) {
  TrainJob job;
  job.id = std::string("test-") + std::string(FamilyName(family));
  job.shape.family = family;
  job.shape.d_model = 32;
  job.shape.n_heads = 4;
  job.shape.d_ff = DefaultDff(32);
  job.shape.vocab_size = 64;
  job.shape.context = 32;
  if (family == Family::kDense) {
    job.shape.n_layers = 2;
  } else {
    job.shape.n_layers = 4;
    job.shape.stride = 2;
    job.shape.capacity = 0.5;
    job.balance_coef = family == Family::kXmod ? 0.01 : 0.0;
    job.router_coef = 0.01;
  }
  job.routed_tokens = RoutedTokens(job.shape.capacity, job.shape.context);
  job.steps = steps;
  job.batch_size = 16;
  job.micro_batch_size = 16;
  job.lr = 1e-2;
  job.min_lr = 1e-3;
  job.warmup_steps = 5;
  job.weight_decay = 0.1;
  job.grad_clip = 1.0;
  job.eval_interval = 10;
  job.eval_tokens = 32 * 32;
  job.checkpoint_interval = 10;
  job.seed = 1234;
  job.flops_per_token = TrainFlopsPerToken(job.shape);
  job.synthetic_seed = 7;
  return job;
}

class Trainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("xmod_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<TrainResult> Run(const TrainJob& job, const std::string& run, bool resume = false,
                                  int64_t stop_after = 0,
                                  const std::function<void(TrainerOptions&)>& hooks = nullptr) {
    auto data = OpenJobData(job);
    EXPECT_TRUE(data.ok());
    auto comm = MakeSingleProcessCommunicator();
    TrainerOptions options;
    options.run_dir = (dir_ / run).string();
    options.resume = resume;
    options.stop_after_step = stop_after;
    options.threads = 1;
    if (hooks) hooks(options);
    return Train(job, **data, *comm, options);
  }

  std::filesystem::path dir_;
};

// Golden values recorded on CPU (Debian LibTorch 1.13, one thread). The band is
// loose enough for BLAS differences between machines and tight enough that a
// broken model, loss or optimizer falls out of it.
TEST_F(Trainer, TinyXmodLearnsTheSyntheticChainWithinTheGoldenBand) {
  auto result = Run(TinyJob(Family::kXmod, 80), "golden");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->outcome, TrainOutcome::kSucceeded);
  EXPECT_EQ(result->step, 80);
  const double uniform = std::log(64.0);
  EXPECT_NEAR(result->train_losses.front(), uniform, 0.15);  // starts near log V
  EXPECT_GT(result->val_loss, kGoldenValLossLow);
  EXPECT_LT(result->val_loss, kGoldenValLossHigh);
  EXPECT_NEAR(result->val_loss_causal, result->val_loss, 0.05);
}

TEST_F(Trainer, ResumedRunReproducesTheUninterruptedRunBitForBit) {
  for (Family family : {Family::kDense, Family::kXmod, Family::kMod}) {
    const TrainJob job = TinyJob(family, 24);
    auto straight = Run(job, std::string("straight-") + std::string(FamilyName(family)));
    ASSERT_TRUE(straight.ok()) << straight.status();
    const std::string run = std::string("split-") + std::string(FamilyName(family));
    auto first = Run(job, run, false, 12);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(first->outcome, TrainOutcome::kStopped);
    auto second = Run(job, run, true);
    ASSERT_TRUE(second.ok()) << second.status();
    ASSERT_EQ(second->outcome, TrainOutcome::kSucceeded);
    EXPECT_EQ(second->resumed_from, 12);
    std::vector<double> joined = first->train_losses;
    joined.insert(joined.end(), second->train_losses.begin(), second->train_losses.end());
    ASSERT_EQ(joined.size(), straight->train_losses.size());
    for (size_t i = 0; i < joined.size(); ++i) {
      EXPECT_EQ(joined[i], straight->train_losses[i]) << FamilyName(family) << " step " << i + 1;
    }
    EXPECT_EQ(second->val_loss, straight->val_loss) << FamilyName(family);
  }
}

TEST_F(Trainer, MetricsFileHoldsEachStepOnceAfterAResume) {
  const TrainJob job = TinyJob(Family::kXmod, 20);
  ASSERT_TRUE(Run(job, "m", false, 15).ok());  // checkpoint at 10 and at the stop, 15
  // Lose the step-15 checkpoint: the resume starts at 10 and must drop rows 11-15.
  std::filesystem::remove_all(dir_ / "m" / "checkpoints" / "step_00000015");
  auto resumed = Run(job, "m", true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from, 10);
  std::ifstream in(dir_ / "m" / "metrics.jsonl");
  std::map<std::pair<std::string, int64_t>, int> seen;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(std::isfinite(j["value"].get<double>()));
    ++seen[{j["name"].get<std::string>(), j["step"].get<int64_t>()}];
  }
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << key.first << " " << key.second;
  EXPECT_EQ(seen.count({"train_loss", 20}), 1u);
  EXPECT_EQ(seen.count({"val_loss", 20}), 1u);
}

TEST_F(Trainer, ADamagedNewestCheckpointFallsBackToTheOneBefore) {
  const TrainJob job = TinyJob(Family::kDense, 20);
  ASSERT_TRUE(Run(job, "c", false, 20).ok());  // checkpoints at 10 and 20
  const auto model = dir_ / "c" / "checkpoints" / "step_00000020" / "model.pt";
  ASSERT_TRUE(std::filesystem::exists(model));
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  auto resumed = Run(job, "c", true);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed_from, 10);
}

TEST_F(Trainer, ACheckpointTheGroupCannotConfirmIsNotWritten) {
  std::vector<int64_t> asked;
  int64_t last_step = 0;
  auto result = Run(TinyJob(Family::kDense, 30), "z", false, 0, [&](TrainerOptions& options) {
    options.on_step = [&](int64_t step) { last_step = step; };
    // The lease is confirmed for the checkpoint at step 10, lost before step 20's.
    options.confirm_checkpoint = [&] {
      asked.push_back(last_step);
      return last_step < 20;
    };
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, TrainOutcome::kStopped);
  EXPECT_EQ(result->step, 20);
  EXPECT_EQ(asked, (std::vector<int64_t>{10, 20}));  // asked at checkpoint steps only
  const auto checkpoints = dir_ / "z" / "checkpoints";
  EXPECT_TRUE(std::filesystem::exists(checkpoints / "step_00000010"));
  EXPECT_FALSE(std::filesystem::exists(checkpoints / "step_00000020"));
}

// Metric rows of a run's metrics.jsonl: every value finite, every step below `limit`.
void ExpectOnlyFiniteRowsBefore(const std::filesystem::path& file, int64_t limit) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j["value"].is_number() && std::isfinite(j["value"].get<double>())) << line;
    EXPECT_LT(j["step"].get<int64_t>(), limit) << line;
  }
}

TEST_F(Trainer, ANonFiniteLossStopsTheRunAsDivergedWithoutReportingIt) {
  const TrainJob job = TinyJob(Family::kXmod, 10);
  auto data = OpenJobData(job);
  ASSERT_TRUE(data.ok());
  auto comm = MakeSingleProcessCommunicator();
  TrainerOptions options;
  options.run_dir = (dir_ / "nan").string();
  options.fault_before_step = [](int64_t step, torch::nn::Module& model) {
    if (step != 3) return;
    torch::NoGradGuard no_grad;
    model.named_parameters()["tok_emb.weight"][5].fill_(std::nan(""));
  };
  auto result = Train(job, **data, *comm, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, TrainOutcome::kDiverged);
  EXPECT_EQ(result->step, 3);
  EXPECT_THAT(result->message, ::testing::HasSubstr("diverged at step 3"));
  ExpectOnlyFiniteRowsBefore(dir_ / "nan" / "metrics.jsonl", 3);
}

TEST_F(Trainer, ANonFiniteLearningRateIsDivergenceToo) {
  TrainJob job = TinyJob(Family::kDense, 10);
  job.lr = std::numeric_limits<double>::quiet_NaN();
  job.warmup_steps = 0;
  auto result = Run(job, "nan-lr");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, TrainOutcome::kDiverged);
  EXPECT_EQ(result->step, 1);
  ExpectOnlyFiniteRowsBefore(dir_ / "nan-lr" / "metrics.jsonl", 1);
}

TEST_F(Trainer, GradientAccumulationMatchesOneLargeBatch) {
  TrainJob whole = TinyJob(Family::kXmod, 6);
  TrainJob split = whole;
  split.micro_batch_size = 4;
  auto a = Run(whole, "whole");
  auto b = Run(split, "split");
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->train_losses.size(); ++i) {
    EXPECT_NEAR(a->train_losses[i], b->train_losses[i], 1e-5 * a->train_losses[i]) << i;
  }
}

TEST(Schedule, WarmupThenCosineToTheMinimum) {
  TrainJob job;
  job.lr = 1.0;
  job.min_lr = 0.1;
  job.steps = 110;
  job.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRate(job, 5), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(job, 10), 1.0);
  EXPECT_NEAR(LearningRate(job, 60), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(job, 110), 0.1, 1e-12);
  job.schedule = LrSchedule::kWsd;
  job.decay_steps = 20;
  EXPECT_DOUBLE_EQ(LearningRate(job, 90), 1.0);
  EXPECT_NEAR(LearningRate(job, 100), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(job, 110), 0.1, 1e-12);
}

TEST(JobFile, MissingFieldsAreNamed) {
  auto job = ParseTrainJob(nlohmann::json{{"id", "x"}, {"family", "xmod"}});
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), ::testing::HasSubstr("'d_model'"));
}

}  // namespace
}  // namespace xmod
