#include "orchestrator/order/law_order.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "nlohmann/json.hpp"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/report/report.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/store/store_test_util.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return store_test::ReadSource("tests/fixtures/" + name);
}

// Chinchilla's law (Hoffmann et al. 2022) with 0.5% multiplicative noise per job,
// fixed by the job id, so that the test's losses do not depend on the order.
double SyntheticLoss(const JobResultRow& j) {
  const std::vector<double> p = {std::log(406.4), std::log(410.7), std::log(1.69), 0.34, 0.28};
  const LawPoint x = ToLawPoint(j);
  std::mt19937_64 rng(std::hash<std::string>()(j.id));
  std::normal_distribution<double> noise(0.0, 0.005);
  return std::exp(DenseLaw::LogLoss(p.data(), x) + noise(rng));
}

class LawOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::make_unique<store_test::TempDatabase>(&clock_);
    store_ = db_->store();
    LawDrivenOrder::Options order_options;
    order_options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.push_back(line);
    };
    order_ = std::make_unique<LawDrivenOrder>(store_, order_options);
    SchedulerOptions options;
    options.on_complete = [this](const std::string& id) { order_->JobCompleted(id); };
    scheduler_ = std::make_unique<Scheduler>(store_, options);
  }
  void TearDown() override {
    order_.reset();
    scheduler_.reset();
    db_.reset();
  }

  std::map<std::string, JobResultRow> Jobs(const std::string& sweep) {
    std::map<std::string, JobResultRow> by_id;
    absl::StatusOr<std::vector<JobResultRow>> jobs = store_->JobResultRows(sweep);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    if (jobs.ok()) {
      for (JobResultRow& j : *jobs) by_id[j.id] = j;
    }
    return by_id;
  }
  std::map<std::string, std::optional<double>> Keys() {
    std::map<std::string, std::optional<double>> keys;
    absl::StatusOr<QueryResult> rows = store_->Query("SELECT job_id, order_key FROM jobs");
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return keys;
    for (const auto& row : rows->rows) {
      keys[std::get<std::string>(row[0])] = std::holds_alternative<double>(row[1])
                                                ? std::optional<double>(std::get<double>(row[1]))
                                                : std::nullopt;
    }
    return keys;
  }
  // Trains (in name only) the leased job: its final validation loss, then success.
  void Finish(const LeaseGrant& g, double loss) {
    const int64_t steps = nlohmann::json::parse(g.config_json).at("steps").get<int64_t>();
    ASSERT_TRUE(scheduler_
                    ->ReportMetrics(g.job_id, g.fencing_token,
                                    {{"val_loss", steps, loss, steps * 1024, 1.0}})
                    .ok());
    ASSERT_TRUE(scheduler_->Complete(g.job_id, g.fencing_token, steps).ok());
  }

  FakeClock clock_;
  std::unique_ptr<store_test::TempDatabase> db_;
  SqliteStore* store_ = nullptr;
  std::unique_ptr<LawDrivenOrder> order_;
  std::unique_ptr<Scheduler> scheduler_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

// Through the real scheduler and store: until the dense law is identifiable the
// leases are cheapest-first and no key is set; after that every completion
// refits in the background, the next lease is the law's first pick, the keys are
// the pending dense jobs' own FLOP figures in the law's order, and the jobs the
// dense law does not read keep cheapest-first.
TEST_F(LawOrderTest, CompletionsRefitTheLawAndTheNextLeaseIsItsPick) {
  ASSERT_TRUE(scheduler_->Submit(Fixture("adaptive.yaml"), "adaptive.yaml").ok());
  const std::string worker = scheduler_->RegisterWorker("host", 1, "").value();
  std::map<std::string, JobResultRow> jobs = Jobs("adaptive");
  ASSERT_EQ(jobs.size(), 27u);
  int steered = 0, not_cheapest = 0, leased = 0;
  while (true) {
    order_->Drain();
    std::map<std::string, JobResultRow> now = Jobs("adaptive");
    std::map<std::string, std::optional<double>> keys = Keys();
    absl::StatusOr<OrderRefit> r = order_->Refit("adaptive");  // what the refitter computed
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->adaptive_sweep);
    std::vector<double> pending_dense_flops, dense_keys;
    const JobResultRow* cheapest = nullptr;
    for (const auto& [id, j] : now) {
      if (j.state != JobState::kPending) continue;
      if (cheapest == nullptr || j.train_flops < cheapest->train_flops) cheapest = &j;
      if (j.family == Family::kDense) {
        pending_dense_flops.push_back(j.train_flops);
        if (r->steered) {
          ASSERT_TRUE(keys[id].has_value()) << id;
          dense_keys.push_back(*keys[id]);
        }
      }
      if (j.family != Family::kDense || !r->steered) {
        EXPECT_FALSE(keys[id].has_value()) << id;
      }
    }
    auto outcome = scheduler_->Lease(worker);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    if (!outcome->grant.has_value()) break;
    const LeaseGrant g = *outcome->grant;
    ++leased;
    if (r->steered) {
      ++steered;
      // The keys are the same FLOP figures, handed out in the law's order.
      std::sort(pending_dense_flops.begin(), pending_dense_flops.end());
      std::sort(dense_keys.begin(), dense_keys.end());
      ASSERT_EQ(dense_keys.size(), pending_dense_flops.size());
      for (size_t i = 0; i < dense_keys.size(); ++i) {
        EXPECT_NEAR(dense_keys[i], pending_dense_flops[i], 1e-9 * pending_dense_flops[i]);
      }
      // The lease takes the law's pick unless a cheaper job of another family
      // holds an earlier place (the X-MoD jobs keep their own).
      if (now.at(g.job_id).family == Family::kDense) {
        EXPECT_EQ(g.job_id, r->order.front());
      } else {
        EXPECT_LE(now.at(g.job_id).train_flops, *keys[r->order.front()] * (1 + 1e-9));
      }
      not_cheapest += g.job_id != cheapest->id;
    } else {
      EXPECT_EQ(g.job_id, cheapest->id) << "cheapest-first until the law is identifiable";
    }
    Finish(g, SyntheticLoss(now.at(g.job_id)));
  }
  std::printf("%d leases, %d steered by the law, %d of them not the cheapest pending job\n", leased,
              steered, not_cheapest);
  EXPECT_EQ(leased, 27);
  EXPECT_GT(steered, 10);
  EXPECT_GT(not_cheapest, 0) << "the law never changed the order";
  std::lock_guard<std::mutex> lock(log_mu_);
  EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [](const std::string& l) {
    return l.find("dense law refitted on") != std::string::npos;
  }));
  EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [](const std::string& l) {
    return l.find("cheapest-first for now (too few points") != std::string::npos;
  }));
}

// Keys only touch pending jobs; a key cleared puts a job back on its own FLOPs.
TEST_F(LawOrderTest, KeysAreWrittenOnlyOnPendingJobs) {
  ASSERT_TRUE(scheduler_->Submit(Fixture("adaptive.yaml"), "adaptive.yaml").ok());
  const std::string worker = scheduler_->RegisterWorker("host", 1, "").value();
  const LeaseGrant g = *scheduler_->Lease(worker)->grant;
  std::map<std::string, JobResultRow> jobs = Jobs("adaptive");
  std::string other;
  for (const auto& [id, j] : jobs) {
    if (id != g.job_id && j.family == Family::kDense) other = id;
  }
  auto changed = store_->SetOrderKeys({{g.job_id, 1.0}, {other, 1.0}});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, 1);
  EXPECT_FALSE(Keys()[g.job_id].has_value());
  EXPECT_EQ(Keys()[other], 1.0);
  EXPECT_EQ(scheduler_->Lease(worker)->grant->job_id, other);  // key 1 FLOP: first
  ASSERT_TRUE(store_->SetOrderKeys({{other, std::nullopt}}).ok());
}

// A sweep without order: adaptive is left alone; one that asks for it with no
// dense job, or with a bad target, is refused at submission and writes nothing.
TEST_F(LawOrderTest, OnlyAdaptiveSweepsAreSteeredAndBadOnesAreRefused) {
  std::string plain = Fixture("adaptive.yaml");
  plain.replace(plain.find("name: adaptive"), 14, "name: plain");
  plain.replace(plain.find("  order: adaptive"), 17, "  order: cheapest");
  ASSERT_TRUE(scheduler_->Submit(plain, "plain.yaml").ok());
  auto r = order_->Refit("plain");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->adaptive_sweep);
  EXPECT_EQ(order_->Refit("nope").status().code(), absl::StatusCode::kNotFound);

  std::string sparse_only = Fixture("adaptive.yaml");
  sparse_only.replace(sparse_only.find("name: adaptive"), 14, "name: sparse");
  const size_t dense_block = sparse_only.find("  - family: dense");
  sparse_only.erase(dense_block, sparse_only.find("  - family: xmod") - dense_block);
  auto refused = scheduler_->Submit(sparse_only, "sparse.yaml");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("sparse.yaml:26: resources.order: adaptive steers by the dense law"));
  EXPECT_EQ(store_->Query("SELECT COUNT(*) FROM sweeps").value().rows[0][0], Value(int64_t{1}));
}

}  // namespace
}  // namespace xmod
