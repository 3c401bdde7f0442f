#include "common/job_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/id.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

nlohmann::json ValidJob() {
  return {{"id", "x"},
          {"family", "dense"},
          {"d_model", 32},
          {"n_heads", 4},
          {"n_layers", 2},
          {"d_ff", 96},
          {"vocab_size", 64},
          {"context", 32},
          {"stride", 1},
          {"capacity", 1.0},
          {"routed_tokens", 32},
          {"gate", "none"},
          {"balance_coef", 0.0},
          {"router_coef", 0.0},
          {"tokens", 1280},
          {"steps", 10},
          {"batch_tokens", 128},
          {"batch_size", 4},
          {"micro_batch_size", 4},
          {"lr", 1e-3},
          {"min_lr", 1e-4},
          {"warmup_steps", 1},
          {"schedule", "cosine"},
          {"decay_steps", 0},
          {"weight_decay", 0.1},
          {"grad_clip", 1.0},
          {"beta1", 0.9},
          {"beta2", 0.95},
          {"eval_interval", 5},
          {"eval_tokens", 1024},
          {"checkpoint_interval", 5},
          {"log_interval", 1},
          {"seed", 1},
          {"precision", "fp32"},
          {"flops_per_token", 1.0},
          {"data", {{"synthetic", true}, {"seed", 3}, {"vocab_size", 64}}}};
}

TEST(JobFile, MissingFieldsAreNamed) {
  auto job = JobFileFromJson(nlohmann::json{{"id", "x"}, {"family", "xmod"}});
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("'d_model'"));
}

// A job file is held to the sweep's size bound too: a d_model near 2^32 would
// wrap the parameter count to a small, plausible number.
TEST(JobFile, AShapeWhoseParameterCountWouldWrapIsRefused) {
  nlohmann::json j = ValidJob();
  j["d_model"] = int64_t{1} << 32;
  j["d_ff"] = int64_t{3} << 32;
  auto job = JobFileFromJson(j);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("more than 2^53"));
}

TEST(JobFile, WritingAndReadingGiveTheSameJob) {
  auto job = JobFileFromJson(ValidJob());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(ToJson(*job), ValidJob());
  nlohmann::json dataset = ValidJob();
  dataset["data"] = {{"path", "/data/x"}, {"vocab_size", 64}};
  dataset["schedule"] = "wsd";
  dataset["decay_steps"] = 2;
  dataset["final_eval_tokens"] = 0;
  auto back = JobFileFromJson(dataset);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data_path, "/data/x");
  EXPECT_EQ(back->schedule, Schedule::kWsd);
  EXPECT_EQ(ToJson(*back), dataset);
  // The id is a hash of the canonical part, which leaves out id and flops_per_token.
  nlohmann::json canonical = CanonicalJson(*back);
  EXPECT_FALSE(canonical.contains("id"));
  EXPECT_FALSE(canonical.contains("flops_per_token"));
}

// -0.0 and 0.0 are one number, so they are one job: every float of the canonical
// JSON, at any depth (the experts object too), is written without its sign at zero.
TEST(JobFile, NegativeZeroAnywhereGivesTheIdOfZero) {
  nlohmann::json positive = ValidJob();
  positive["family"] = "moe";
  positive["gate"] = "softmax";
  positive["experts"] = {{"count", 4},          {"top_k", 2},          {"width", 48},
                         {"shared", 0},         {"shared_width", 0},   {"dense_layers", 0},
                         {"target_ratio", 0.0}, {"z_coef", 0.0},       {"capacity_factor", 0.0},
                         {"bias_rate", 0.0},    {"entropy_init", 0.0}, {"entropy_multiplier", 1.0}};
  positive["balance_coef"] = 0.0;
  positive["weight_decay"] = 0.0;
  positive["min_lr"] = 0.0;
  nlohmann::json negative = positive;
  for (const char* key :
       {"balance_coef", "router_coef", "weight_decay", "grad_clip", "min_lr", "beta1", "beta2"}) {
    positive[key] = 0.0;
    negative[key] = -0.0;
  }
  for (const char* key :
       {"target_ratio", "z_coef", "capacity_factor", "bias_rate", "entropy_init"}) {
    negative["experts"][key] = -0.0;
  }
  ASSERT_NE(negative.dump(), positive.dump());  // the JSON tells them apart
  auto a = JobFileFromJson(positive);
  auto b = JobFileFromJson(negative);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  EXPECT_EQ(CanonicalJson(*b).dump(), CanonicalJson(*a).dump());
  EXPECT_EQ(HexId(CanonicalJson(*b).dump()), HexId(CanonicalJson(*a).dump()));
  EXPECT_EQ(CanonicalJson(*b).dump().find("-0.0"), std::string::npos);

  // Everything else is written as it was: a job without a -0.0 keeps its bytes.
  auto plain = JobFileFromJson(ValidJob());
  ASSERT_TRUE(plain.ok());
  nlohmann::json expected = ValidJob();
  expected.erase("id");
  expected.erase("flops_per_token");
  EXPECT_EQ(CanonicalJson(*plain).dump(), expected.dump());
}

TEST(JobFile, FinalEvalTokensIsOptionalAndNeverNegative) {
  nlohmann::json j = ValidJob();
  auto absent = JobFileFromJson(j);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->final_eval_tokens.has_value());
  j["final_eval_tokens"] = 0;
  EXPECT_EQ(JobFileFromJson(j)->final_eval_tokens, std::optional<int64_t>(0));
  j["final_eval_tokens"] = 1 << 20;
  EXPECT_EQ(JobFileFromJson(j)->final_eval_tokens, std::optional<int64_t>(1 << 20));
  for (const nlohmann::json& bad :
       {nlohmann::json(-1), nlohmann::json("all"), nlohmann::json(2.5)}) {
    j["final_eval_tokens"] = bad;
    auto job = JobFileFromJson(j);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("'final_eval_tokens'"));
  }
}

// The memory settings are optional, round-trip, and stay out of the canonical
// JSON (so out of the id) at their defaults.
TEST(JobFile, MemorySettingsAreOptionalAndRoundTrip) {
  nlohmann::json j = ValidJob();
  auto plain = JobFileFromJson(j);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->recompute);
  EXPECT_EQ(plain->optimizer_sharding, "none");
  EXPECT_FALSE(CanonicalJson(*plain).contains("recompute"));
  EXPECT_FALSE(CanonicalJson(*plain).contains("optimizer_sharding"));
  j["recompute"] = true;
  j["optimizer_sharding"] = "zero1";
  auto set = JobFileFromJson(j);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->recompute);
  EXPECT_EQ(set->optimizer_sharding, "zero1");
  auto again = JobFileFromJson(ToJson(*set));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CanonicalJson(*again), CanonicalJson(*set));
  j["optimizer_sharding"] = "zero3";
  EXPECT_THAT(std::string(JobFileFromJson(j).status().message()),
              HasSubstr("'optimizer_sharding' must be 'none' or 'zero1'"));
  j["optimizer_sharding"] = "none";
  j["recompute"] = "yes";
  EXPECT_THAT(std::string(JobFileFromJson(j).status().message()), HasSubstr("'recompute'"));
}

// Every field replaced by a value of every wrong kind, or removed: an error
// naming that field (or, for optional fields, a job), never an exception.
TEST(JobFile, AnyMistypedFieldIsAnErrorNamingItNeverAThrow) {
  const std::vector<nlohmann::json> wrong = {
      nlohmann::json("text"),     nlohmann::json::array({1}), nlohmann::json::object(),
      nlohmann::json(true),       nlohmann::json(-3),         nlohmann::json(2.5),
      nlohmann::json(UINT64_MAX), nlohmann::json(0),
  };
  int refused = 0;
  const nlohmann::json valid = ValidJob();
  std::vector<std::string> keys;
  for (auto it = valid.begin(); it != valid.end(); ++it) keys.push_back(it.key());
  for (const std::string& key : keys) {
    for (const nlohmann::json& bad : wrong) {
      if (bad == valid.at(key)) continue;
      nlohmann::json j = ValidJob();
      j[key] = bad;
      absl::StatusOr<JobFile> job;
      EXPECT_NO_THROW(job = JobFileFromJson(j)) << key << " = " << bad;
      if (!job.ok()) {
        ++refused;
        EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(job.status().message()), HasSubstr(key)) << bad;
      }
    }
    nlohmann::json j = ValidJob();
    j.erase(key);
    EXPECT_NO_THROW((void)JobFileFromJson(j)) << key;
  }
  EXPECT_GT(refused, 150);
  // A wrong type for a number is never silently converted.
  nlohmann::json j = ValidJob();
  j["steps"] = 10.5;
  EXPECT_FALSE(JobFileFromJson(j).ok());
  j = ValidJob();
  j["seed"] = -1;
  EXPECT_THAT(std::string(JobFileFromJson(j).status().message()), HasSubstr("negative"));
}

TEST(JobFile, AnyPrefixOfAJobFileIsRefusedWithoutAThrow) {
  const std::string text = ValidJob().dump();
  for (size_t n = 0; n < text.size(); ++n) {
    absl::StatusOr<JobFile> job;
    EXPECT_NO_THROW(job = ParseJobFile(std::string_view(text).substr(0, n), "lease"));
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr("lease: "));
  }
  EXPECT_TRUE(ParseJobFile(text, "lease").ok());
  EXPECT_TRUE(ParseJobFile("[" + text + "]", "lease").ok());
  EXPECT_THAT(std::string(ParseJobFile("[" + text + "," + text + "]", "f").status().message()),
              HasSubstr("holds 2 jobs"));
}

TEST(JobFile, ScheduleNamesRoundTrip) {
  for (Schedule s : {Schedule::kCosine, Schedule::kConstant, Schedule::kWsd}) {
    EXPECT_EQ(ParseSchedule(ScheduleName(s)).value(), s);
  }
  EXPECT_FALSE(ParseSchedule("linear").ok());
}

}  // namespace
}  // namespace xmod
