// The worker binary end to end: jobs resolved by `xmod expand`, trained by
// `xmod-train` alone and under `mpirun -np 2`, on the synthetic source and on
// real text datasets prepared by `xmod data prepare` (bytes, SentencePiece).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/paths/paths.h"
#include "tests/process.h"

namespace xmod {
namespace {

using testing::CommandResult;

class WorkerE2e : public testing::TempDirTest {
 protected:
  // The jobs of a sweep file, as `xmod expand --format json` resolves them.
  nlohmann::json Expand(const std::string& spec) {
    CommandResult r = Command(XMOD_BIN, {"expand", spec, "--format", "json"});
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }

  std::string WriteJob(const nlohmann::json& job, const std::string& name) {
    std::ofstream(Path(name)) << job.dump(2);
    return Path(name);
  }

  // (name, step) -> value from a run's metrics.jsonl.
  std::map<std::pair<std::string, int64_t>, double> Metrics(const std::string& run_dir,
                                                            const std::string& id) {
    std::map<std::pair<std::string, int64_t>, double> m;
    std::ifstream in(run_dir + "/" + id + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      m[{j["name"], j["step"]}] = j["value"];
    }
    return m;
  }
};

TEST_F(WorkerE2e, TwoRanksTrainTheSameCurveAsOneRank) {
  const auto jobs = Expand(std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  for (int index : {0, 2}) {  // an X-MoD job and the dense job of the first scale
    nlohmann::json job = jobs[index];
    // The X-MoD job's last evaluation covers the whole split, sharded over the ranks.
    if (index == 0) job["final_eval_tokens"] = 0;
    const std::string id = job["id"];
    const std::string file = WriteJob(job, id + ".json");
    CommandResult one = Command(
        XMOD_TRAIN_BIN, {"--job", file, "--run-dir", Path("one"), "--threads", "1", "--quiet"});
    ASSERT_EQ(one.code, 0) << one.err;
    CommandResult two =
        Command(MPIEXEC, {"-np", "2", "--allow-run-as-root", "--oversubscribe", XMOD_TRAIN_BIN,
                          "--job", file, "--run-dir", Path("two"), "--threads", "1", "--quiet"});
    ASSERT_EQ(two.code, 0) << two.err;
    const auto a = Metrics(Path("one"), id);
    const auto b = Metrics(Path("two"), id);
    int compared = 0, evaluated = 0;
    for (const auto& [key, value] : a) {
      const bool eval = key.first.rfind("val_", 0) == 0;
      if (key.first != "train_loss" && !eval) continue;
      ASSERT_EQ(b.count(key), 1u) << key.first << " " << key.second;
      if (key.first.rfind("val_capacity", 0) == 0 || key.first == "val_flops_ratio_causal") {
        // A threshold decision sigmoid(r) > 0.5 may flip for a token with r ≈ 0 when
        // the ranks batch the windows differently: a token or two of thousands.
        EXPECT_NEAR(b.at(key), value, 1e-3) << key.first << " " << key.second;
      } else if (key.first.size() > 3 && key.first.substr(key.first.size() - 3) == "_se") {
        // A standard error is a small difference of sums: it keeps fewer digits.
        EXPECT_NEAR(b.at(key), value, 1e-4 * value) << key.first << " " << key.second;
      } else {
        EXPECT_NEAR(b.at(key), value, 1e-5 * std::abs(value)) << key.first << " " << key.second;
      }
      compared += key.first == "train_loss" || key.first == "val_loss";
      evaluated += eval;
    }
    EXPECT_EQ(compared, job["steps"].get<int>() + 4) << id;  // every step + 4 evaluations
    // Per evaluation: val_loss, val_loss_se; X-MoD adds the causal loss, its SE and
    // five capacity metrics.
    EXPECT_EQ(evaluated, 4 * (job["family"] == "dense" ? 2 : 9)) << id;
  }
}

// ZeRO-1 (optimizer_sharding: zero1) on two real MPI ranks: the curve tracks the
// unsharded two-rank run (the gradient norm is summed in another order, fp64
// over shards instead of fp32 over parameters, so not bit for bit); a stop and
// resume on the same two ranks continues exactly; and its checkpoint, which
// keeps the unsharded format, resumes on one rank and back on two.
TEST_F(WorkerE2e, ShardedOptimizerTracksTheUnshardedRunAndResumesOnAnyRankCount) {
  const auto jobs = Expand(std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  nlohmann::json job = jobs[0];  // X-MoD
  job["grad_clip"] = 0.05;       // clipped at every step: the global norm matters
  const std::string id = job["id"];
  const int steps = job["steps"];
  ASSERT_GE(steps, 8);
  const std::string plain = WriteJob(job, "plain.json");
  job["optimizer_sharding"] = "zero1";
  const std::string sharded = WriteJob(job, "sharded.json");
  const auto train = [&](const std::string& file, const std::string& run, int ranks,
                         std::vector<std::string> extra) {
    std::vector<std::string> args = {XMOD_TRAIN_BIN, "--job",     file, "--run-dir",
                                     Path(run),      "--threads", "1",  "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r =
        ranks == 1 ? Command(args[0], {args.begin() + 1, args.end()}) : Command(MPIEXEC, [&] {
          std::vector<std::string> m = {"-np", std::to_string(ranks), "--allow-run-as-root",
                                        "--oversubscribe"};
          m.insert(m.end(), args.begin(), args.end());
          return m;
        }());
    EXPECT_EQ(r.code, 0) << run << ": " << r.err;
    return r.err;
  };
  train(plain, "plain", 2, {});
  EXPECT_THAT(train(sharded, "sharded", 2, {}),
              ::testing::HasSubstr("AdamW moments sharded over 2 ranks (ZeRO-1)"));
  const int half = steps / 2;
  train(sharded, "resumed", 2, {"--stop-after-step", std::to_string(half)});
  std::filesystem::copy(Path("resumed"), Path("elastic"), std::filesystem::copy_options::recursive);
  train(sharded, "resumed", 2, {"--resume"});
  train(plain, "elastic", 1, {"--resume"});  // 2 -> 1: the zero1 checkpoint, unsharded
  train(plain, "grow", 1, {"--stop-after-step", std::to_string(half)});
  train(sharded, "grow", 2, {"--resume"});  // 1 -> 2: an unsharded checkpoint, sharded
  const auto a = Metrics(Path("plain"), id);
  const auto b = Metrics(Path("sharded"), id);
  const auto c = Metrics(Path("resumed"), id);
  const auto e = Metrics(Path("elastic"), id);
  const auto g = Metrics(Path("grow"), id);
  double worst = 0.0;
  for (int step = 1; step <= steps; ++step) {
    const std::pair<std::string, int64_t> key{"train_loss", step};
    ASSERT_EQ(b.count(key), 1u) << step;
    worst = std::max(worst, std::abs(b.at(key) - a.at(key)) / a.at(key));
    EXPECT_NEAR(b.at(key), a.at(key), 1e-4 * a.at(key)) << "zero1 vs unsharded, step " << step;
    EXPECT_EQ(c.at(key), b.at(key)) << "zero1 resumed on the same ranks, step " << step;
    EXPECT_NEAR(e.at(key), b.at(key), 1e-4 * b.at(key)) << "2 -> 1 ranks, step " << step;
    EXPECT_NEAR(g.at(key), b.at(key), 1e-4 * b.at(key)) << "1 -> 2 ranks, step " << step;
  }
  const std::pair<std::string, int64_t> last{"val_loss", steps};
  EXPECT_EQ(c.at(last), b.at(last));
  EXPECT_NEAR(e.at(last), b.at(last), 1e-4 * b.at(last));
  EXPECT_NEAR(g.at(last), b.at(last), 1e-4 * b.at(last));
  std::printf("zero1 vs unsharded: largest relative train-loss difference %.2e over %d steps\n",
              worst, steps);
}

TEST_F(WorkerE2e, TrainingOnRealTextBeatsTheUnigramEntropy) {
  // The project's own documentation is real English text that ships with it.
  std::vector<std::string> args = {"data",           "prepare", "--output", Path("text"),
                                   "--val-fraction", "0.1",     "--input"};
  for (const char* doc :
       {"README.md", "sweeps/README.md", "schema/README.md", "tests/fixtures/README.md"}) {
    args.push_back(std::string(XMOD_SOURCE_DIR) + "/" + doc);
  }
  CommandResult prepared = Command(XMOD_BIN, args);
  ASSERT_EQ(prepared.code, 0) << prepared.err;
  CommandResult stats = Command(XMOD_BIN, {"data", "stats", Path("text"), "--format", "json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  const double entropy = nlohmann::json::parse(stats.out)[1]["unigram_entropy_nats"];

  std::ofstream(Path("text.yaml")) << "name: text\n"
                                      "data: {path: "
                                   << Path("text")
                                   << "}\n"
                                      "family: dense\n"
                                      "scales: {s: {d_model: 64, n_heads: 4, n_layers: 2}}\n"
                                      "grid: {context: [64]}\n"
                                      "budget: {tokens: 600000}\n"
                                      "train: {batch_tokens: 4096, lr: 1.0e-2, eval_tokens: 8192}\n"
                                      "design: {laws: []}\n";
  const auto jobs = Expand(Path("text.yaml"));
  ASSERT_EQ(jobs.size(), 1u);
  const std::string file = WriteJob(jobs[0], "job.json");
  // One thread: CTest runs two tests at once on two cores, and two LibTorch
  // processes of two threads each spin against each other (10x slower).
  CommandResult trained =
      Command(XMOD_TRAIN_BIN, {"--job", file, "--run-dir", Path("runs"), "--threads", "1"});
  ASSERT_EQ(trained.code, 0) << trained.err;
  const auto metrics = Metrics(Path("runs"), jobs[0]["id"]);
  const double val = metrics.at({"val_loss", jobs[0]["steps"].get<int64_t>()});
  std::printf("text: unigram entropy %.4f nats, val_loss after %lld steps %.4f\n", entropy,
              static_cast<long long>(jobs[0]["steps"].get<int64_t>()), val);
  EXPECT_LT(val, entropy - 0.3);
}

// A SentencePiece BPE model trained by `xmod data prepare` on the project's own
// docs (real English and code), its dataset trained through `xmod run` (a
// coordinator, an MPI worker group): the run succeeds and its validation loss
// ends below the unigram entropy of those tokens.
TEST_F(WorkerE2e, SentencePieceDatasetTrainsThroughXmodRun) {
  std::vector<std::string> args = {"data",
                                   "prepare",
                                   "--output",
                                   Path("sp"),
                                   "--tokenizer",
                                   "sentencepiece-bpe",
                                   "--tokenizer-vocab",
                                   "512",
                                   "--val-fraction",
                                   "0.1",
                                   "--input"};
  for (const char* doc :
       {"README.md", "docs/architecture.md", "docs/baselines.md", "docs/checkpoints.md",
        "docs/data.md", "docs/job-file.md", "docs/laws.md", "docs/memory.md", "docs/metrics.md",
        "docs/model.md", "docs/order.md", "docs/schedules.md"}) {
    args.push_back(std::string(XMOD_SOURCE_DIR) + "/" + doc);
  }
  CommandResult prepared = Command(XMOD_BIN, args);
  ASSERT_EQ(prepared.code, 0) << prepared.err;
  EXPECT_THAT(prepared.out, ::testing::HasSubstr("vocab 512, EOS 2)"));
  EXPECT_THAT(prepared.out, ::testing::HasSubstr("every 10th document, offset 5: 1 of 12"));
  CommandResult stats = Command(XMOD_BIN, {"data", "stats", Path("sp"), "--format", "json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  const double entropy = nlohmann::json::parse(stats.out)[1]["unigram_entropy_nats"];

  std::ofstream(Path("sp.yaml")) << "name: sp\n"
                                    "data: {path: "
                                 << Path("sp")
                                 << ", vocab_size: 512}\n"
                                    "family: dense\n"
                                    "scales: {s: {d_model: 64, n_heads: 4, n_layers: 2}}\n"
                                    "grid: {context: [64]}\n"
                                    "budget: {tokens: 400000}\n"
                                    "train: {batch_tokens: 4096, lr: 1.0e-2, eval_tokens: 8192}\n"
                                    "design: {laws: []}\n";
  const auto jobs = Expand(Path("sp.yaml"));
  ASSERT_EQ(jobs.size(), 1u);
  CommandResult run =
      Command(XMOD_BIN, {"run", Path("sp.yaml"), "--db", Path("sp.db"), "--run-dir", Path("runs")});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, ::testing::HasSubstr("1 succeeded, 0 failed or cancelled, 0 unfinished"));
  const auto metrics = Metrics(Path("runs"), jobs[0]["id"]);
  const double val = metrics.at({"val_loss", jobs[0]["steps"].get<int64_t>()});
  std::printf("sentencepiece: unigram entropy %.4f nats, val_loss after %lld steps %.4f\n", entropy,
              static_cast<long long>(jobs[0]["steps"].get<int64_t>()), val);
  EXPECT_LT(val, entropy);
}

// The acceptance check of the demo: its cheapest job, trained on the prepared
// Brown corpus (deploy/prepare-demo-data.sh, run by deploy/test.sh), ends well
// below the corpus's unigram entropy.
TEST_F(WorkerE2e, CheapestDemoJobOnTheBrownCorpusBeatsTheUnigramEntropy) {
  const std::string brown = std::string(XMOD_SOURCE_DIR) + "/data/brown";
  if (!std::filesystem::exists(brown + "/meta.json")) {
    GTEST_SKIP() << "data/brown is not prepared (bash deploy/prepare-demo-data.sh)";
  }
  CommandResult stats = Command(XMOD_BIN, {"data", "stats", brown, "--format", "json"});
  ASSERT_EQ(stats.code, 0) << stats.err;
  const double entropy = nlohmann::json::parse(stats.out)[1]["unigram_entropy_nats"];
  auto jobs = Expand(std::string(XMOD_SOURCE_DIR) + "/sweeps/demo.yaml");
  nlohmann::json cheapest = jobs[0];
  for (const auto& j : jobs) {
    if (j["train_flops"].get<double>() < cheapest["train_flops"].get<double>()) cheapest = j;
  }
  cheapest["data"]["path"] = brown;
  CommandResult trained = Command(XMOD_TRAIN_BIN, {"--job", WriteJob(cheapest, "job.json"),
                                                   "--run-dir", Path("runs"), "--threads", "1"});
  ASSERT_EQ(trained.code, 0) << trained.err;
  const auto metrics = Metrics(Path("runs"), cheapest["id"]);
  const int64_t steps = cheapest["steps"];
  const double val = metrics.at({"val_loss", steps});
  std::printf("brown: unigram entropy %.4f nats; %s job %s, %lld steps: val_loss %.4f\n", entropy,
              cheapest["family"].get<std::string>().c_str(),
              cheapest["id"].get<std::string>().c_str(), static_cast<long long>(steps), val);
  // The cheapest demo job (an X-MoD model of 12k active parameters at 20 tokens
  // per parameter, the compute rule's batch and lr) measured 2.481 against an
  // entropy of 3.082: it has learned much more than byte frequencies.
  EXPECT_LT(val, entropy - 0.3);
}

// --version (issue 35): the build, LibTorch, MPI, CUDA and NCCL, and the device.
TEST_F(WorkerE2e, XmodTrainNamesItsBuildLibrariesAndDevice) {
  const CommandResult r = Command(XMOD_TRAIN_BIN, {"--version"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::MatchesRegex(
                         "xmod-train [0-9.]+ \\(commit ([0-9a-f]{12}(-dirty)?|unknown), .+\\)\n"
                         "LibTorch [0-9.]+.*, .+, CUDA [^,]+, NCCL [^,]+\n"
                         "device cpu: .+\n"));
}

TEST_F(WorkerE2e, BadJobFilesAndDataAreClearErrors) {
  std::ofstream(Path("bad.json")) << R"({"id": "x", "family": "xmod"})";
  CommandResult r = Command(XMOD_TRAIN_BIN, {"--job", Path("bad.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("field 'd_model' is missing"));
  auto jobs = Expand(std::string(XMOD_SOURCE_DIR) + "/sweeps/demo.yaml");
  jobs[0]["data"]["path"] = Path("no-such-dataset");
  r = Command(XMOD_TRAIN_BIN, {"--job", WriteJob(jobs[0], "job.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("no-such-dataset/meta.json"));
}

}  // namespace
}  // namespace xmod
