#include "orchestrator/sweep/expand.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

SweepSpec Load(const std::string& name) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/sweeps/" + name + ".yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The worst FLOP mismatch integer layer counts allow: half of the costliest layer.
double MatchTolerance(const ResolvedJob& job) {
  ModelShape one = DenseReference(job.file.shape, 1);
  const double dense_layer = ForwardFlopsPerToken(one) - 2.0 * one.d_model * one.vocab_size;
  return 0.5 * 3.0 * dense_layer / job.dense_flops_per_token;
}

TEST(Expand, SmokeSweepHasEightDistinctJobs) {
  auto jobs = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 8u);
  std::set<std::string> ids;
  for (const ResolvedJob& j : *jobs) ids.insert(j.file.id);
  EXPECT_EQ(ids.size(), jobs->size());
}

// The job count is bounded before anything is sized: a grid of 10^12 points is a
// clear file:line: grid: refusal with its count, not an allocation failure.
TEST(Expand, AGridOverTheJobLimitIsRefusedWithItsCountBeforeAnythingIsSized) {
  const SweepSpec smoke = Load("smoke");
  EXPECT_EQ(CountGridPoints(smoke), 8);
  EXPECT_TRUE(ExpandSweep(smoke, 8).ok());
  auto refused = ExpandSweep(smoke, 7);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status().message())
                .find(smoke.source + ":" + std::to_string(smoke.grid_line) +
                      ": grid: the grid makes 8 jobs, more than the limit of 7"),
            std::string::npos)
      << refused.status();

  std::string axis;
  for (int i = 1; i <= 10000; ++i) axis += (i > 1 ? ", " : "") + std::to_string(i);
  const std::string text =
      "name: huge\ndata: {synthetic: true, vocab_size: 64}\nfamily: xmod\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 4}}\n"
      "grid: {scale: [s], sparsity: [0.5, 0.75], stride: [" +
      axis + "], context: [" + axis + "], seed: [" + axis +
      "]}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: auto}\n"
      "design: {laws: []}\n";
  auto huge = ParseSweepSpec(text, "huge.yaml");
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_EQ(CountGridPoints(*huge), int64_t{2} * 10000 * 10000 * 10000);
  const auto start = std::chrono::steady_clock::now();
  auto big = ExpandSweep(*huge);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.status().message())
                .find("huge.yaml:5: grid: the grid makes 2000000000000 jobs, more than the "
                      "limit of 1000000"),
            std::string::npos)
      << big.status();
}

// A grid list is refused at its own `grid:` line too, not at line 1.
TEST(Expand, AGridListOverTheJobLimitIsRefusedAtItsGridLine) {
  auto spec = ParseSweepSpec(
      "name: l\ndata: {synthetic: true, vocab_size: 64}\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 4}}\n"
      "grid:\n  - {family: dense, context: [32, 64]}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: 1024, lr: auto}\ndesign: {laws: []}\n",
      "l.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto refused = ExpandSweep(*spec, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message())
                .find("l.yaml:4: grid: the grid makes 2 jobs, more than the limit of 1"),
            std::string::npos)
      << refused.status();
}

TEST(Expand, IdsAreStableAcrossExpansions) {
  const SweepSpec spec = Load("smoke");
  auto a = ExpandSweep(spec);
  auto b = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].file.id, (*b)[i].file.id);
  // Pinned: an id changes only when the canonical config (or its hash) does.
  EXPECT_EQ((*a)[2].file.shape.family, Family::kDense);
  EXPECT_EQ((*a)[2].file.id, "565dc07eba5346ea");
}

// train.lr_scan: the jobs of the smallest scales again at lr × each other factor,
// their lr_factor recorded; every other job keeps its id; too many scales refused.
TEST(Expand, AnLrScanRepeatsTheSmallestScalesJobsAtEachFactor) {
  SweepSpec spec = Load("smoke");
  const auto plain = ExpandSweep(spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  spec.train.lr_scan_factors = {0.5, 1.0, 2.0};
  spec.train.lr_scan_scales = 1;
  const auto scanned = ExpandSweep(spec);
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  // The smallest scale by 12 · L0 · d².
  std::string smallest;
  double size = 1e300;
  for (const ScaleSpec& s : spec.scales) {
    const double n = 12.0 * s.n_layers * s.d_model * s.d_model;
    if (n < size) {
      size = n;
      smallest = s.name;
    }
  }
  size_t at_smallest = 0;
  std::map<std::string, const ResolvedJob*> by_id;
  for (const ResolvedJob& j : *plain) {
    at_smallest += j.scale == smallest;
    by_id[j.file.id] = &j;
  }
  ASSERT_GT(at_smallest, 0u);
  ASSERT_LT(at_smallest, plain->size());  // the test needs a scale that is not scanned
  EXPECT_EQ(scanned->size(), plain->size() + 2 * at_smallest);
  size_t kept = 0;
  std::map<double, size_t> factors;
  for (const ResolvedJob& j : *scanned) {
    if (by_id.count(j.file.id) > 0) {
      ++kept;
      EXPECT_FALSE(j.file.lr_factor.has_value());
      continue;
    }
    ASSERT_TRUE(j.file.lr_factor.has_value()) << j.file.id;
    EXPECT_EQ(j.scale, smallest);
    ++factors[*j.file.lr_factor];
    // Its twin at the sweep's lr: the same job but for lr and min_lr.
    JobFile twin = j.file;
    twin.lr /= *j.file.lr_factor;
    twin.min_lr /= *j.file.lr_factor;
    twin.lr_factor.reset();
    bool found = false;
    for (const ResolvedJob& p : *plain) {
      if (std::abs(p.file.lr - twin.lr) < 1e-15 && p.file.shape.family == twin.shape.family &&
          p.scale == j.scale && p.file.seed == twin.seed && p.file.tokens == twin.tokens &&
          p.file.shape.context == twin.shape.context && p.sparsity == j.sparsity) {
        found = true;
      }
    }
    EXPECT_TRUE(found) << j.file.id;
  }
  EXPECT_EQ(kept, plain->size());
  EXPECT_EQ(factors, (std::map<double, size_t>{{0.5, at_smallest}, {2.0, at_smallest}}));
  spec.train.lr_scan_scales = 99;
  const auto refused = ExpandSweep(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("train.lr_scan.scales: 99 smallest scales"),
            std::string::npos)
      << refused.status();
}

// Every shipped sweep keeps the ids of its jobs: an id is the hash of the job's
// canonical config, so a change here means a change in what a job trains (or a
// refactor that moved a field it should not have). The digest is HexId of every
// id in expansion order, one per line; the count catches a dropped job.
TEST(Expand, TheShippedSweepsKeepTheirJobIds) {
  const struct {
    const char* sweep;
    size_t jobs;
    const char* digest;
  } pinned[] = {
      // demo: its sparse jobs train their dense partners' FLOPs (budget.match) since
      // issue 32, so those 15 ids changed then; issue 46 added a second X-MoD seed
      // at s32 (4 new jobs, the 33 others unchanged).
      {"baselines", 14, "47ec9819a70f4c9e"}, {"demo", 37, "29f8ad3952039a21"},
      {"demo-wsd", 24, "8a6f21dab580b7fb"},  {"moe", 27, "6c94455cc9455f2f"},
      {"smoke", 8, "76fe354080e84e67"},      {"xmod-cluster", 408, "c947998da97ee25d"},
  };
  for (const auto& p : pinned) {
    auto jobs = ExpandSweep(Load(p.sweep));
    ASSERT_TRUE(jobs.ok()) << p.sweep << ": " << jobs.status();
    std::string ids;
    for (const ResolvedJob& j : *jobs) absl::StrAppend(&ids, j.file.id, "\n");
    EXPECT_EQ(jobs->size(), p.jobs) << p.sweep;
    EXPECT_EQ(HexId(ids), p.digest) << p.sweep;
  }
}

// The job file is the one contract: what the orchestrator writes, the worker's
// reader gives back field for field, and its canonical part is what the id hashes.
TEST(Expand, EveryJobFileReadsBackAsWrittenAndHashesToItsId) {
  for (const char* name : {"smoke", "demo", "xmod-cluster"}) {
    auto jobs = ExpandSweep(Load(name));
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    for (const ResolvedJob& j : *jobs) {
      const nlohmann::json written = j.ToJson();
      auto back = JobFileFromJson(written);
      ASSERT_TRUE(back.ok()) << name << " " << j.file.id << ": " << back.status();
      EXPECT_EQ(CanonicalJson(*back), j.CanonicalConfig()) << j.file.id;
      EXPECT_EQ(HexId(CanonicalJson(*back).dump()), j.file.id);
      EXPECT_EQ(ToJson(*back)["flops_per_token"], written["flops_per_token"]);
    }
  }
}

// The status message of a sweep that parses but does not expand.
std::string ExpansionError(const std::string& text) {
  auto spec = ParseSweepSpec(text, "x.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return "";
  auto jobs = ExpandSweep(*spec);
  EXPECT_FALSE(jobs.ok()) << jobs->size() << " jobs";
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(jobs.status().message());
}

// A dataset's fingerprint (its meta.json, docs/data.md) is part of every job's id:
// re-tokenised data in the same folder gives new jobs; a folder without one (or
// not readable where the spec is loaded) keeps the ids it always had.
TEST(Expand, TheDatasetsFingerprintIsPartOfTheJobId) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xmod_fingerprint_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string text = "name: d\ndata: {path: " + dir.string() +
                           ", vocab_size: 256}\nfamily: dense\n"
                           "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\n"
                           "grid: {context: [32]}\nbudget: {tokens: 4096}\n"
                           "train: {batch_tokens: 1024}\ndesign: {laws: []}\n";
  auto id_with = [&](const std::string& meta) {
    if (meta.empty()) {
      std::filesystem::remove(dir / "meta.json");
    } else {
      std::ofstream(dir / "meta.json") << meta;
    }
    auto spec = ParseSweepSpec(text, "d.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return std::string();
    auto jobs = ExpandSweep(*spec);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() && jobs->size() == 1 ? jobs->front().file.id : std::string();
  };
  const std::string none = id_with("");
  const std::string a = id_with(R"({"fingerprint": "xxh3:0123456789abcdef0123456789abcdef"})");
  const std::string b = id_with(R"({"fingerprint": "xxh3:fedcba9876543210fedcba9876543210"})");
  const std::string old = id_with(R"({"format": "xmod-tokens"})");  // from before fingerprints
  EXPECT_FALSE(none.empty());
  EXPECT_NE(a, none);
  EXPECT_NE(a, b);
  EXPECT_EQ(old, none);
  EXPECT_EQ(id_with(R"({"fingerprint": "xxh3:0123456789abcdef0123456789abcdef"})"), a);
  // A meta.json that is not JSON is refused at data.path's line.
  std::ofstream(dir / "meta.json") << "{not json";
  auto spec = ParseSweepSpec(text, "d.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("d.yaml:2: data.path"), std::string::npos)
      << spec.status();
  std::filesystem::remove_all(dir);
}

// data.eos_token states the id the sweep expects to end each document: it must
// be the one the folder's meta.json records (xmod data import --eos, prepare).
TEST(Expand, TheSpecsEosTokenMustBeTheDatasetsOwn) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xmod_eos_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string text = "name: d\ndata: {path: " + dir.string() +
                           ", vocab_size: 50304,\n  eos_token: 50256}\nfamily: dense\n"
                           "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\n"
                           "grid: {context: [32]}\nbudget: {tokens: 4096}\n"
                           "train: {batch_tokens: 1024}\ndesign: {laws: []}\n";
  auto error = [&](const std::string& meta) {
    std::ofstream(dir / "meta.json") << meta;
    auto spec = ParseSweepSpec(text, "d.yaml");
    return spec.ok() ? std::string() : std::string(spec.status().message());
  };
  EXPECT_EQ(error(R"({"eos_token": 50256})"), "");
  EXPECT_NE(error(R"({"eos_token": 2})")
                .find("d.yaml:3: data.eos_token: 50256, but " + dir.string() +
                      "/meta.json says its documents end with 2"),
            std::string::npos);
  EXPECT_NE(error(R"({"format": "xmod-tokens"})").find("records no eos_token"), std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(error(""), "");  // no meta.json where the spec is loaded: nothing to check here
  auto synthetic = ParseSweepSpec(
      "name: d\ndata: {synthetic: true, vocab_size: 64, eos_token: 3}\nfamily: dense\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\ngrid: {context: [32]}\n"
      "budget: {tokens: 4096}\ntrain: {batch_tokens: 1024}\ndesign: {laws: []}\n",
      "s.yaml");
  ASSERT_FALSE(synthetic.ok());
  EXPECT_NE(synthetic.status().message().find("only a dataset folder"), std::string::npos);
}

// D = r·N or C / F past 2^63 used to wrap in llround and become a 1-token job.
// Past 2^53 (a bound on every count) it is refused at the budget value's line.
TEST(Expand, ABudgetGivingMoreThanTwoToThe53TokensIsRefusedAtItsLine) {
  const std::string head =
      "name: b\ndata: {synthetic: true, vocab_size: 64}\nfamily: dense\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\ngrid: {context: [32]}\n"
      "train: {batch_tokens: 1024}\ndesign: {laws: []}\n";
  // 1e15 tokens per parameter x 26784 parameters = 2.7e19 tokens.
  EXPECT_NE(ExpansionError(head + "budget:\n  tokens_per_param: [20, 1e15]\n")
                .find("x.yaml:9: budget.tokens_per_param[1]: tokens_per_param 1e+15 for scale s, "
                      "dense at context 32 (26784 active parameters"),
            std::string::npos);
  const std::string message = ExpansionError(head + "budget:\n  flops: 1e40\n");
  EXPECT_NE(message.find("x.yaml:9: budget.flops: flops 1e+40 for scale s"), std::string::npos)
      << message;
  EXPECT_NE(message.find("tokens, more than 2^53 = 9007199254740992"), std::string::npos)
      << message;

  // In a list of blocks, at the block's own budget; a budget that gives less than
  // one token is refused too, not made a 1-token job.
  const std::string blocks =
      "name: b\ndata: {synthetic: true, vocab_size: 64}\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\n"
      "grid:\n"
      "  - family: dense\n"
      "    context: [32]\n"
      "    budget:\n"
      "      flops:\n"
      "        - 1e12\n"
      "        - 1000\n"
      "train: {batch_tokens: 1024}\ndesign: {laws: []}\n";
  const std::string small = ExpansionError(blocks);
  EXPECT_NE(small.find("x.yaml:10: grid[0].budget.flops[1]: flops 1000 for scale s"),
            std::string::npos)
      << small;
  EXPECT_NE(small.find("less than one"), std::string::npos) << small;
}

// When no layer count up to 10^5 reaches the dense FLOPs (here 20000 dense layers
// against routed layers that cost ~1/6000 of one), the refusal points at the
// scale's n_layers, the FLOP target, with the point that cannot match it.
TEST(Expand, NoLayerCountReachingTheFlopTargetIsRefusedAtTheScalesNLayers) {
  const std::string message = ExpansionError(
      "name: f\ndata: {synthetic: true, vocab_size: 64}\nfamily: xmod\n"
      "scales:\n"
      "  s:\n"
      "    d_model: 32\n"
      "    n_heads: 2\n"
      "    n_layers: 20000\n"
      "grid: {sparsity: [0.999], stride: [1000], context: [4096]}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: 4096}\ndesign: {laws: []}\n");
  EXPECT_NE(message.find("x.yaml:8: scales.s.n_layers: xmod at context 4096, sparsity 0.999, "
                         "stride 1000 cannot match the FLOPs of 20000 dense layers: no layer "
                         "count up to 100000 reaches"),
            std::string::npos)
      << message;
}

// Each field within its bound, the FLOP-matched model (deeper than the dense one)
// still too large to count: refused at its scale, not wrapped.
TEST(Expand, AFlopMatchedModelTooLargeToCountIsRefusedAtItsScale) {
  const std::string text =
      "name: w\ndata: {synthetic: true, vocab_size: 64}\nfamily: xmod\n"
      "scales:\n"
      "  wide: {d_model: 1048576, n_heads: 1024, n_layers: 600}\n"
      "grid: {sparsity: [0.5], stride: [2], context: [32]}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: 1024}\ndesign: {laws: []}\n";
  const std::string message = ExpansionError(text);
  EXPECT_NE(message.find("x.yaml:5: scales.wide: xmod at context 32 with "), std::string::npos)
      << message;
  EXPECT_NE(message.find("more than 2^53"), std::string::npos) << message;
}

// A baseline that cannot be sized is refused at its entry in `baselines`.
TEST(Expand, ABaselineThatCannotBeSizedIsRefusedAtItsEntry) {
  const std::string message = ExpansionError(
      "name: d\ndata: {synthetic: true, vocab_size: 64}\nfamily: dense\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\n"
      "grid: {context: [32]}\n"
      "baselines:\n"
      "  - mod\n"
      "  - deco\n"
      "deco: {expert_width: 4194304}\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: 1024}\ndesign: {laws: []}\n");
  EXPECT_NE(message.find("x.yaml:8: baselines[1]: scale s, context 32, deco sized against dense: "
                         "no expert count"),
            std::string::npos)
      << message;
}

// -0.0 and 0.0 are one number and one job, whether the sweep file or code sets it.
TEST(Expand, ANegativeZeroGivesTheJobIdOfZero) {
  const auto ids = [](const SweepSpec& spec) {
    auto jobs = ExpandSweep(spec);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    std::vector<std::string> out;
    if (jobs.ok()) {
      for (const ResolvedJob& j : *jobs) out.push_back(j.file.id);
    }
    return out;
  };
  const std::string text =
      "name: z\ndata: {synthetic: true, vocab_size: 64}\nfamily: xmod\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 4}}\n"
      "grid: {sparsity: [0.5], stride: [2], context: [32]}\nbaselines: [moe, deco]\n"
      "budget: {tokens: 8192}\ndesign: {laws: []}\n"
      "moe: {z_coef: ZERO, capacity_factor: ZERO, bias_rate: ZERO}\n"
      "deco: {entropy_init: ZERO}\n"
      "train: {batch_tokens: 1024, weight_decay: ZERO, min_lr_ratio: ZERO, balance_coef: ZERO, "
      "router_coef: ZERO, grad_clip: ZERO, beta1: ZERO}\n";
  const auto with = [&](const std::string& zero) {
    std::string t = text;
    for (size_t at; (at = t.find("ZERO")) != std::string::npos;) t.replace(at, 4, zero);
    auto spec = ParseSweepSpec(t, "z.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  };
  const std::vector<std::string> zero = ids(with("0.0"));
  ASSERT_EQ(zero.size(), 3u);
  EXPECT_EQ(ids(with("-0.0")), zero);
  // Set in code, past the parser: the canonical JSON still writes 0.0.
  SweepSpec spec = with("0.0");
  spec.train.weight_decay = -0.0;
  spec.train.min_lr_ratio = -0.0;
  spec.train.router_coef = -0.0;
  spec.family_options["moe"]["z_coef"] = -0.0;
  spec.family_options["deco"]["entropy_init"] = -0.0;
  EXPECT_EQ(ids(spec), zero);
}

// The rows per rank reach 2^40; the micro-batch choice walks their divisors in
// O(sqrt(n)), not every number below them (which took hours).
TEST(Expand, AHugeBatchIsPlannedWithoutWalkingEveryMicroBatch) {
  const std::string head =
      "name: h\ndata: {synthetic: true, vocab_size: 64}\nfamily: dense\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 2}}\ngrid: {context: [1]}\n"
      "budget: {tokens: 2199023255552}\ndesign: {laws: []}\n";
  for (const std::string& tail :
       {std::string("train: {batch_tokens: 1099511627776, micro_batch_tokens: 999999999999}\n"),
        std::string("resources: {gpu_memory_gb: 80}\n"
                    "train: {batch_tokens: 1099511627776, micro_batch_tokens: auto}\n")}) {
    auto spec = ParseSweepSpec(head + tail, "h.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    const auto start = std::chrono::steady_clock::now();
    auto jobs = ExpandSweep(*spec);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    const int64_t micro = (*jobs)[0].file.micro_batch_size;
    EXPECT_EQ((int64_t{1} << 40) % micro, 0) << micro;
    EXPECT_EQ((*jobs)[0].file.steps, 2);
    // Fixed: the largest divisor of 2^40 rows that is at most 999999999999, 2^39.
    if (tail.find("auto") == std::string::npos) {
      EXPECT_EQ(micro, int64_t{1} << 39);
    }
  }
}

TEST(Expand, StrideOnePointIsTheDenseBaselineJob) {
  SweepSpec spec = Load("smoke");
  spec.grid_stride = {1, 2};
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok());
  // Per scale: sparsity {0.5, 0.875} x stride 1 collapse into the dense job,
  // stride 2 gives two X-MoD jobs, plus the MoD baseline: 4 jobs, as before.
  EXPECT_EQ(jobs->size(), 8u);
}

TEST(Expand, ClusterSweepIsFlopMatchedAtThreeBudgetsPerActiveParameter) {
  auto jobs = ExpandSweep(Load("xmod-cluster"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_GT(jobs->size(), 100u);
  double worst = 0.0;
  for (const ResolvedJob& j : *jobs) {
    const double r = j.budget_value;
    EXPECT_TRUE(r == 10.0 || r == 20.0 || r == 40.0) << j.file.id;
    EXPECT_EQ(j.file.tokens, std::llround(r * static_cast<double>(j.n_params_active))) << j.file.id;
    EXPECT_GE(j.tokens_trained(), j.file.tokens) << j.file.id;
    EXPECT_LE(std::abs(j.flops_ratio() - 1.0), MatchTolerance(j)) << j.file.id;
    worst = std::max(worst, std::abs(j.flops_ratio() - 1.0));
    EXPECT_LE(j.n_params_active, j.n_params_total) << j.file.id;
  }
  EXPECT_LT(worst, 0.05);
}

TEST(Expand, MatchLayersKeepsTheDenseDepth) {
  SweepSpec spec = Load("smoke");
  spec.match = MatchMode::kLayers;
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok());
  for (const ResolvedJob& j : *jobs) EXPECT_EQ(j.file.shape.n_layers, 4) << j.file.id;
}

TEST(Expand, ResolvesScheduleBatchAndRouting) {
  auto jobs = ExpandSweep(Load("smoke"));
  ASSERT_TRUE(jobs.ok());
  const ResolvedJob& x = (*jobs)[0];  // micro, sparsity 0.5, stride 2
  EXPECT_EQ(x.file.shape.family, Family::kXmod);
  EXPECT_EQ(x.file.routed_tokens, 16);  // round(0.5 * 32)
  EXPECT_EQ(x.file.gate, "variance_scaled");
  EXPECT_EQ(x.file.batch_size, 32);  // 1024 tokens / context 32
  EXPECT_EQ(x.file.steps, 16);       // 16384 / 1024
  EXPECT_EQ(x.file.warmup_steps, 2);
  EXPECT_DOUBLE_EQ(x.train_flops, x.file.flops_per_token * 16 * 1024);
  const ResolvedJob& mod = (*jobs)[3];
  EXPECT_EQ(mod.file.shape.family, Family::kMod);
  EXPECT_EQ(mod.file.gate, "sigmoid");
  EXPECT_EQ(mod.file.routed_tokens, 4);  // round(0.125 * 32)
  EXPECT_EQ(mod.file.balance_coef, 0.0);
}

TEST(Expand, TenThousandJobGridTakesWellUnderASecond) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/bench/grid-10k.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto start = std::chrono::steady_clock::now();
  auto jobs = ExpandSweep(*spec);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 10000u);
  // Alone it takes 0.3-0.5 s here; under a parallel test run on two shared cores
  // it has taken 0.7 s (bench/expand_bench measures the speed itself).
  EXPECT_LT(seconds, 1.0) << "expanding 10,000 jobs took " << seconds << " s";
}

// Every job of the paper-scale sweep fits its declared 80 GB per rank, with the
// micro-batch, recomputation and sharding expansion chose (issue: jobs that
// would need 290 GB of activations at their old fixed micro-batch).
TEST(ExpandMemory, EveryClusterJobFitsItsDeclaredDevice) {
  const SweepSpec spec = Load("xmod-cluster");
  ASSERT_GT(spec.resources.gpu_memory_gb, 0);
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  const double usable = UsableDeviceBytes(spec.resources.gpu_memory_gb * 1e9);
  int recomputed = 0;
  for (const ResolvedJob& j : *jobs) {
    EXPECT_GT(j.memory.peak, 0);
    EXPECT_LE(j.memory.peak, usable) << j.file.id;
    EXPECT_EQ(j.file.optimizer_sharding, "zero1");  // auto with 8 ranks
    EXPECT_EQ((j.file.batch_size / j.ranks) % j.file.micro_batch_size, 0) << j.file.id;
    // The largest micro-batch that fits: the next larger divisor would not.
    const int64_t per_rank = j.file.batch_size / j.ranks;
    for (int64_t m = j.file.micro_batch_size + 1; m <= per_rank; ++m) {
      if (per_rank % m != 0) continue;
      MemoryConfig c;
      c.micro_batch_rows = m;
      c.micro_batches = per_rank / m;
      c.eval_rows = EvalRows(m, j.file.shape.context, j.file.shape.vocab_size);
      c.bf16 = true;
      c.recompute = j.file.recompute;
      c.optimizer_shards = j.ranks;
      EXPECT_GT(EstimateTrainingMemory(j.file.shape, c).peak, usable)
          << j.file.id << " micro " << m;
      break;
    }
    recomputed += j.file.recompute;
  }
  // Recomputation only where nothing fits without it: a few long-context jobs.
  EXPECT_GT(recomputed, 0);
  EXPECT_LT(recomputed, static_cast<int>(jobs->size()) / 10);
}

std::string MemorySweep(const std::string& train, const std::string& resources) {
  return "name: mem\ndata: {synthetic: true, vocab_size: 50304}\nfamily: xmod\n"
         "scales: {s: {d_model: 2048, n_heads: 16, n_layers: 20}}\n"
         "grid: {scale: [s], sparsity: [0.875], stride: [8], context: [8192]}\n"
         "budget: {tokens: 100000000000}\n"
         "train: {batch_tokens: 4194304, precision: bf16, " +
         train + "}\nresources: {ranks: 8, " + resources + "}\ndesign: {laws: []}\n";
}

TEST(ExpandMemory, AJobThatCannotFitIsRefusedWithItsNumbers) {
  auto spec = ParseSweepSpec(
      MemorySweep("micro_batch_tokens: 65536, recompute: auto, optimizer_sharding: none",
                  "gpu_memory_gb: 16"),
      "mem.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto jobs = ExpandSweep(*spec);
  ASSERT_FALSE(jobs.ok());
  const std::string m(jobs.status().message());
  EXPECT_NE(m.find("mem.yaml:8: resources.gpu_memory_gb: scale s, xmod, context 8192"),
            std::string::npos)
      << m;
  for (const char* part : {"per rank", "recompute on", "optimizer sharding none", "weights ",
                           "optimizer ", "activations ", "16 GB leaves"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m;
  }
}

TEST(ExpandMemory, AutoChoosesShardingThenTheLargestMicroBatchThenRecomputation) {
  const auto expand = [](const std::string& train, double gb) {
    auto spec =
        ParseSweepSpec(MemorySweep(train, "gpu_memory_gb: " + std::to_string(gb)), "mem.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto jobs = ExpandSweep(*spec);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? jobs->front() : ResolvedJob{};
  };
  const std::string all_auto =
      "micro_batch_tokens: auto, recompute: auto, optimizer_sharding: auto";
  const ResolvedJob big = expand(all_auto, 141);
  const ResolvedJob small = expand(all_auto, 80);
  EXPECT_EQ(big.file.optimizer_sharding, "zero1");
  EXPECT_GE(big.file.micro_batch_size, small.file.micro_batch_size);
  EXPECT_LE(small.memory.peak, UsableDeviceBytes(80e9));
  // Sharding divides the moments over the ranks: 8·P bytes become about P.
  const ResolvedJob unsharded =
      expand("micro_batch_tokens: 8192, recompute: true, optimizer_sharding: none", 1000);
  const ResolvedJob sharded =
      expand("micro_batch_tokens: 8192, recompute: true, optimizer_sharding: zero1", 1000);
  EXPECT_NEAR(sharded.memory.optimizer / unsharded.memory.optimizer, 1.0 / 8.0, 0.02);
  EXPECT_EQ(unsharded.memory.weights, sharded.memory.weights);
  // Recomputation is taken only when nothing fits without it.
  const ResolvedJob roomy = expand("micro_batch_tokens: 8192, recompute: auto", 1000);
  EXPECT_FALSE(roomy.file.recompute);
  EXPECT_FALSE(roomy.ToJson().contains("recompute"));  // at its default, out of the id
}

TEST(ExpandMemory, AutoMicroBatchNeedsADeclaredDeviceMemory) {
  auto spec = ParseSweepSpec(MemorySweep("micro_batch_tokens: auto", "max_attempts: 2"), "m.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.status().message())
                .find("m.yaml:7: train.micro_batch_tokens: auto chooses the micro-batch"),
            std::string::npos)
      << spec.status();
  auto bad = ParseSweepSpec(MemorySweep("recompute: sometimes", "gpu_memory_gb: 80"), "m.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("train.recompute: unknown value 'sometimes' (known: false, true, auto)"),
            std::string::npos)
      << bad.status();
}

// The baselines sweep: per X-MoD point a MoE baseline at the dense model's active
// FLOPs and (within one expert) the X-MoD job's total parameters; DECO at the dense
// model's total parameters; every count as the accounting states it.
TEST(ExpandBaselines, MoeMatchesEachXmodPointAndDecoTheDenseModel) {
  auto jobs = ExpandSweep(Load("baselines"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::map<std::string, const ResolvedJob*> by_config;
  int moe = 0, deco = 0;
  for (const ResolvedJob& j : *jobs) {
    if (j.file.shape.family == Family::kXmod) {
      by_config[absl::StrCat(j.scale, " xmod sparsity ", j.sparsity, " stride ",
                             j.file.shape.stride)] = &j;
    }
    if (j.file.shape.family == Family::kDense) by_config[j.scale + " dense"] = &j;
  }
  for (const ResolvedJob& j : *jobs) {
    if (!IsExpertFamily(j.file.shape.family)) continue;
    const ResolvedJob* match = by_config[j.scale + " " + j.matched_to];
    ASSERT_NE(match, nullptr) << j.scale << " " << j.matched_to;
    EXPECT_EQ(j.matched_params, match->n_params_total);
    // The count is the closest whole number of experts: one more or one fewer is
    // no closer to the target.
    ModelShape other = j.file.shape;
    const double error = std::abs(double(j.n_params_total - j.matched_params));
    for (int64_t step : {-1, 1}) {
      other.experts.experts = j.file.shape.experts.experts + step;
      if (other.experts.experts < std::max<int64_t>(1, j.file.shape.experts.top_k)) continue;
      EXPECT_GE(std::abs(double(CountParams(other).non_embedding - j.matched_params)), error);
    }
    EXPECT_EQ(j.file.shape.n_layers, j.dense_layers);
    if (j.file.shape.family == Family::kMoe) {
      ++moe;
      EXPECT_EQ(j.matched_to.rfind("xmod sparsity ", 0), 0u) << j.matched_to;
      EXPECT_EQ(j.file.shape.experts.top_k, 2);
      EXPECT_EQ(j.file.shape.experts.width, j.file.shape.d_ff / 2);
      // Two experts of d_ff / 2: the dense MLP's FLOPs plus the router's 2·d·E.
      const double router = 3.0 * 2.0 * j.file.shape.d_model * j.file.shape.experts.experts *
                            double(j.file.shape.n_layers);
      EXPECT_NEAR(j.file.flops_per_token, j.dense_flops_per_token + router, 1e-6);
      EXPECT_NEAR(j.sparsity, 1.0 - 2.0 / double(j.file.shape.experts.experts), 1e-12);
      EXPECT_EQ(j.file.gate, "softmax");
      EXPECT_EQ(j.file.balance_coef, 0.01);
      EXPECT_EQ(j.file.expert_training.z_coef, 1e-3);
    } else {
      ++deco;
      EXPECT_EQ(j.matched_to, "dense");
      EXPECT_EQ(j.file.shape.experts.dense_layers, 1);
      EXPECT_EQ(j.file.gate, "relu");
      // DECO trains every expert: active = total, training FLOPs as executed.
      EXPECT_EQ(j.n_params_active, j.n_params_total);
      EXPECT_LT(j.inference_flops_per_token, j.file.flops_per_token / 3.0);
      EXPECT_NEAR(j.sparsity_notions.expert, 0.8, 1e-12);
    }
    // The job file carries the experts and reads back to the same job.
    auto back = JobFileFromJson(ToJson(j.file));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape.experts.experts, j.file.shape.experts.experts);
    EXPECT_EQ(HexId(CanonicalJson(*back).dump()), j.file.id);
  }
  EXPECT_EQ(moe, 4);  // two X-MoD points at each of two scales
  EXPECT_EQ(deco, 2);
}

TEST(ExpandBaselines, TheMoeFamilyTakesItsExpertsFromSparsityAndTopK) {
  SweepSpec spec = Load("baselines");
  spec.family = Family::kMoe;
  spec.baselines = {Family::kDense};
  spec.grid_sparsity = {0.5, 0.75};
  spec.grid_stride = {};
  spec.grid_top_k = {1, 2};
  spec.grid_granularity = {1, 4};
  EXPECT_EQ(CountGridPoints(spec), 2 * (8 + 1));
  auto jobs = ExpandSweep(spec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  int moe = 0;
  for (const ResolvedJob& j : *jobs) {
    if (j.file.shape.family != Family::kMoe) continue;
    ++moe;
    const ExpertShape& e = j.file.shape.experts;
    EXPECT_NEAR(1.0 - double(e.top_k) / double(e.experts), j.sparsity, 1e-12);
    EXPECT_NEAR(j.sparsity_notions.expert, j.sparsity, 1e-12);
    EXPECT_TRUE(e.width == j.file.shape.d_ff || e.width == j.file.shape.d_ff / 4) << e.width;
    EXPECT_TRUE(j.matched_to.empty());
    // Active parameters: everything but the E − k unused experts of each layer.
    EXPECT_EQ(j.n_params_active, j.n_params_total - j.file.shape.n_layers * (e.experts - e.top_k) *
                                                        3 * j.file.shape.d_model * e.width);
  }
  EXPECT_EQ(moe, 16);
}
// Mixture of Layers (issue 33): a mol block has one job per block sparsity, with
// N − S = k / (1 − σ_b) routed blocks of width d / thin_divisor and the stage count
// whose FLOPs come closest to the dense model's; a mol baseline is one job at the
// section's layout.
TEST(ExpandBaselines, TheMolFamilyIsFlopMatchedWithRoutedBlocksFromItsSparsity) {
  auto spec = ParseSweepSpec(
      "name: m\ndata: {synthetic: true, vocab_size: 64}\nfamily: mol\n"
      "scales: {s: {d_model: 64, n_heads: 4, n_layers: 4}}\n"
      "mol: {shared: 1, top_k: 2, routed_attention: softmax, balance_coef: 0.1}\n"
      "grid: {context: [64], sparsity: [0, 0.5, 0.75]}\nbaselines: [dense]\n"
      "budget: {tokens: 8192}\ntrain: {batch_tokens: 1024}\n",
      "m.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountGridPoints(*spec), 4);
  auto jobs = ExpandSweep(*spec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::set<int64_t> blocks;
  for (const ResolvedJob& j : *jobs) {
    if (j.file.shape.family != Family::kMol) continue;
    const MolShape& m = j.file.shape.mol;
    blocks.insert(m.blocks);
    EXPECT_EQ(m.thin_width, 16);
    EXPECT_EQ(m.shared, 1);
    EXPECT_EQ(m.top_k, 2);
    EXPECT_FALSE(m.routed_deltanet);
    EXPECT_NEAR(1.0 - 2.0 / double(m.blocks - 1), j.sparsity, 1e-12);
    EXPECT_NEAR(j.sparsity_notions.expert, j.sparsity, 1e-12);
    EXPECT_DOUBLE_EQ(j.file.balance_coef, 0.1);
    EXPECT_EQ(j.matched_to, "dense");
    // The stage count is the FLOP match: one stage more or less is further off.
    ModelShape other = j.file.shape;
    for (int64_t step : {-1, 1}) {
      other.n_layers = j.file.shape.n_layers + step;
      EXPECT_GE(std::abs(3.0 * ForwardFlopsPerToken(other) / j.dense_flops_per_token - 1.0),
                std::abs(j.flops_ratio() - 1.0));
    }
    EXPECT_LT(std::abs(j.flops_ratio() - 1.0), 0.05) << j.flops_ratio();
  }
  EXPECT_EQ(blocks, (std::set<int64_t>{3, 5, 9}));
  EXPECT_NE(SizingReport(*jobs).find("stages of 9 thin blocks of width 16 (1 shared, top-2 of "
                                     "8 routed: softmax)"),
            std::string::npos)
      << SizingReport(*jobs);
}

// `xmod expand` gives the MoL paper's own parameter count next to xmod's: its
// Table 1 model (d 1024, 8 stages of 5 blocks of 256, top-3, a tied 32K
// embedding) is 52.5M without the embedding and 85.2M with it; its Table 5 model
// (d 2048, 24 stages of 1+3of15 of 512, GPT-2's vocabulary) 0.607B active.
TEST(ExpandBaselines, TheSizingLineReproducesTheMolPapersParameterCounts) {
  const auto report = [](const std::string& scale, const std::string& mol, int64_t vocab) {
    auto spec = ParseSweepSpec(
        absl::StrCat("name: p\ndata: {synthetic: true, vocab_size: ", vocab,
                     "}\nfamily: dense\nmatch: layers\n", "scales: {s: ", scale, "}\nmol: ", mol,
                     "\ngrid: {context: [512]}\nbaselines: [mol]\n"
                     "budget: {tokens: 1000000}\n"
                     "train: {batch_tokens: 8192}\n"),
        "p.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    auto jobs = ExpandSweep(*spec);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? SizingReport(*jobs) : std::string();
  };
  const std::string t1 = report("{d_model: 1024, n_heads: 16, n_layers: 8}",
                                "{blocks: 5, shared: 0, top_k: 3}", 32000);
  EXPECT_NE(t1.find("8 stages of 5 thin blocks of width 256 (0 shared, top-3 of 5"),
            std::string::npos)
      << t1;
  EXPECT_NE(t1.find("counts 52469760 non-embedding (85.24M with the tied embedding)"),
            std::string::npos)
      << t1;
  const std::string t5 = report("{d_model: 2048, n_heads: 16, n_layers: 24}",
                                "{blocks: 15, shared: 1, top_k: 3}", 50257);
  EXPECT_NE(t5.find("24 stages of 15 thin blocks of width 512 (1 shared, top-3 of 14"),
            std::string::npos)
      << t5;
  EXPECT_NE(t5.find("active (0.607B with it)"), std::string::npos) << t5;
}

// Cooldown branches (issue 14): per seed one constant-LR trunk to the last branch
// start, keeping a checkpoint at every start, and one branch per budget with the
// trunk's lr, batch and warm-up, starting at round((1 − f)·steps); the three
// budgets D, 2D, 4D cost at most 0.7 of training them alone.
TEST(ExpandBranches, BudgetsOfOneConfigurationShareATrunkAndCostAtMostSevenTenths) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/wsd_branches.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train.decay_shape, DecayShape::kOneMinusSqrt);  // the default
  auto jobs = ExpandSweep(*spec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 8u);  // two seeds x (a trunk + three branches)
  double flops = 0, standalone = 0;
  std::map<std::string, const ResolvedJob*> trunks;
  for (const ResolvedJob& j : *jobs) {
    flops += j.train_flops;
    standalone += j.standalone_flops();
    if (std::string(j.role()) == "trunk") trunks[j.file.id] = &j;
  }
  ASSERT_EQ(trunks.size(), 2u);
  for (const ResolvedJob& j : *jobs) {
    if (std::string(j.role()) == "trunk") {
      EXPECT_EQ(j.file.schedule, Schedule::kConstant);
      EXPECT_EQ(j.file.keep_steps, (std::vector<int64_t>{13, 26, 51}));
      EXPECT_EQ(j.file.steps, 51);
      EXPECT_DOUBLE_EQ(j.train_flops, j.file.flops_per_token * 51 * 1024);
      EXPECT_EQ(j.standalone_flops(), 0.0);
      continue;
    }
    ASSERT_EQ(std::string(j.role()), "branch");
    ASSERT_EQ(trunks.count(j.file.parent), 1u);
    const ResolvedJob& t = *trunks[j.file.parent];
    EXPECT_EQ(j.file.seed, t.file.seed);
    EXPECT_EQ(j.file.schedule, Schedule::kWsd);
    EXPECT_EQ(j.file.decay_shape, DecayShape::kOneMinusSqrt);
    EXPECT_EQ(j.file.steps, j.file.tokens / 1024);
    EXPECT_EQ(j.file.decay_steps, std::llround(0.2 * j.file.steps));
    EXPECT_EQ(j.file.start_step, j.file.steps - j.file.decay_steps);
    EXPECT_EQ(j.file.lr, t.file.lr);
    EXPECT_EQ(j.file.warmup_steps, t.file.warmup_steps);
    EXPECT_EQ(j.file.batch_tokens, t.file.batch_tokens);
    // Only the cooldown is this job's work; alone it would train from step 0.
    EXPECT_DOUBLE_EQ(j.train_flops,
                     j.file.flops_per_token * (j.file.steps - j.file.start_step) * 1024);
    EXPECT_DOUBLE_EQ(j.standalone_flops(), j.file.flops_per_token * j.file.steps * 1024);
    // The job file says where it starts, and the id covers it.
    auto f_read = JobFileFromJson(j.ToJson());
    ASSERT_TRUE(f_read.ok()) << f_read.status();
    const JobFile& f = *f_read;
    EXPECT_EQ(f.parent, t.file.id);
    EXPECT_EQ(f.start_step, j.file.start_step);
    EXPECT_EQ(j.file.id, HexId(CanonicalJson(f).dump()));
  }
  EXPECT_LE(flops / standalone, 0.7);
  EXPECT_NEAR(flops / standalone, (51.0 + 3 + 6 + 13) / (16 + 32 + 64), 1e-12);

  // cooldown_branches: false trains each budget alone, from scratch.
  spec->train.cooldown_branches = false;
  auto alone = ExpandSweep(*spec);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->size(), 6u);
  for (const ResolvedJob& j : *alone) EXPECT_EQ(std::string(j.role()), "run");
}

// A trunk warm-up (the largest budget's) that runs past the smallest budget's
// cooldown start is refused, naming the sweep file, the line of the warm-up and
// the group.
TEST(ExpandBranches, AWarmupPastABranchStartIsRefusedNamingTheGroup) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/wsd_branches.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->train.warmup_steps = 14;  // the 16-step budget starts its cooldown at 13
  auto jobs = ExpandSweep(*spec);
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(std::string(jobs.status().message())
                .find("wsd_branches.yaml:22: train.warmup_steps: cooldown branches of scale "
                      "micro, dense, context 32, 16384 tokens: the trunk's warm-up (14 steps"),
            std::string::npos)
      << jobs.status();
}

// The wsd settings are checked where they are written.
TEST(ExpandBranches, WsdSettingsAreCheckedInTheSpec) {
  const std::string head =
      "name: w\ndata: {synthetic: true, vocab_size: 64}\nfamily: dense\n"
      "scales: {s: {d_model: 32, n_heads: 2, n_layers: 4}}\n"
      "grid: {scale: [s], context: [32]}\nbudget: {tokens: 8192}\ndesign: {laws: []}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"train: {batch_tokens: 1024, schedule: wsd, decay_shape: sqrt}",
       "train.decay_shape: unknown decay shape 'sqrt'"},
      {"train: {batch_tokens: 1024, decay_shape: cosine}",
       "train.decay_shape: applies to schedule: wsd only"},
      {"train: {batch_tokens: 1024, cooldown_branches: true}",
       "train.cooldown_branches: applies to schedule: wsd only"},
      {"train: {batch_tokens: 1024, schedule: wsd, min_lr_ratio: 0, decay_shape: exponential}",
       "train.decay_shape: exponential decays to min_lr_ratio x lr and needs min_lr_ratio > 0"},
      {"train: {batch_tokens: 1024, schedule: wsd, cooldown_branches: maybe}",
       "train.cooldown_branches: expected true or false"},
  };
  for (const auto& [train, message] : cases) {
    auto spec = ParseSweepSpec(head + train + "\n", "w.yaml");
    ASSERT_FALSE(spec.ok()) << train;
    EXPECT_NE(std::string(spec.status().message()).find(message), std::string::npos)
        << train << ": " << spec.status();
  }
  auto ok = ParseSweepSpec(head +
                               "train: {batch_tokens: 1024, schedule: wsd, decay_shape: "
                               "cosine, cooldown_branches: false}\n",
                           "w.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->train.decay_shape, DecayShape::kCosine);
  EXPECT_FALSE(ok->train.cooldown_branches);
}

}  // namespace
}  // namespace xmod
