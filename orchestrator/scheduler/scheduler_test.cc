#include "orchestrator/scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "orchestrator/scheduler/progress.h"
#include "orchestrator/store/cells.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

std::string SmokeYaml() {
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SqliteStore::Options o;
    o.path = ":memory:";
    o.clock = &clock_;
    store_ = std::move(SqliteStore::Open(o).value());
    SchedulerOptions options;
    options.lease_ttl_seconds = 30;
    options.max_metrics_per_batch = 100;
    scheduler_ = std::make_unique<Scheduler>(store_.get(), options);
    ASSERT_TRUE(scheduler_->Submit(SmokeYaml(), "smoke.yaml").ok());
    worker_ = scheduler_->RegisterWorker("host", 1, "").value();
  }

  LeaseGrant Lease(const std::string& worker = "") {
    auto outcome = scheduler_->Lease(worker.empty() ? worker_ : worker);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->grant.has_value());
    return *outcome->grant;
  }

  JobState State(const std::string& id) { return store_->GetJobState(id).value(); }

  // The job's step count, from the job file the lease carries.
  static int64_t StepsOf(const LeaseGrant& g) {
    return nlohmann::json::parse(g.config_json).at("steps").get<int64_t>();
  }
  // The checkpoint folder a worker reports for the job at `step`.
  static std::string CheckpointPath(const LeaseGrant& g, int64_t step) {
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
    return "runs/" + g.job_id + "/checkpoints/" + name;
  }

  int64_t MetricRows(const std::string& id) {
    auto curve = store_->JobCurve(id);
    EXPECT_TRUE(curve.ok());
    return static_cast<int64_t>(curve->rows.size());
  }

  std::vector<ReportedMetric> Losses(int64_t from, int64_t to) {
    std::vector<ReportedMetric> m;
    for (int64_t s = from; s <= to; ++s)
      m.push_back({"train_loss", s, 5.0 - 0.1 * s, s * 100, s * 1e6});
    return m;
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::string worker_;
};

TEST_F(SchedulerTest, LeaseGrantsTheCheapestPendingJobWithAttemptOneAndAFreshToken) {
  const LeaseGrant a = Lease();
  const LeaseGrant b = Lease();
  EXPECT_EQ(a.attempt, 1);
  EXPECT_EQ(a.resume_step, 0);
  EXPECT_NE(a.fencing_token, b.fencing_token);
  EXPECT_THAT(a.config_json, HasSubstr(a.job_id));
  EXPECT_EQ(State(a.job_id), JobState::kLeased);
  auto progress = store_->JobProgress("smoke").value();
  EXPECT_EQ(progress[0].job_id, a.job_id);  // cheapest first
  EXPECT_EQ(progress[1].job_id, b.job_id);
}

TEST_F(SchedulerTest, HigherPriorityIsLeasedBeforeCheaperJobs) {
  std::string yaml = SmokeYaml();
  yaml.replace(yaml.find("name: smoke"), 11, "name: urgent");
  yaml.replace(yaml.find("max_attempts: 3"), 15, "max_attempts: 3\n  priority: 5");
  yaml.replace(yaml.find("tokens: 16384"), 13, "tokens: 32768");  // new, costlier jobs
  ASSERT_TRUE(scheduler_->Submit(yaml, "urgent.yaml").ok());
  const LeaseGrant g = Lease();
  auto urgent = store_->JobProgress("urgent").value();
  EXPECT_EQ(g.job_id, urgent[0].job_id);
}

// The store's SQL order is the rule's order (lease_rules.h LeasesBefore), over a
// grid larger than one page of candidates.
TEST_F(SchedulerTest, JobsAreLeasedInTheRulesOrder) {
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/lawgrid.yaml");
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(scheduler_->Submit(text.str(), "lawgrid.yaml", true).ok());
  // A law-driven order key on every third job (schema/0008_adaptive_order.sql),
  // some below and some above the job's own FLOPs.
  auto ids = store_->Query("SELECT job_id, train_flops FROM jobs ORDER BY job_id");
  ASSERT_TRUE(ids.ok());
  std::vector<std::pair<std::string, std::optional<double>>> set;
  for (size_t i = 0; i < ids->rows.size(); i += 3) {
    set.emplace_back(std::get<std::string>(ids->rows[i][0]),
                     std::get<double>(ids->rows[i][1]) * (i % 2 == 0 ? 0.1 : 7.0));
  }
  ASSERT_TRUE(store_->SetOrderKeys(set).ok());
  auto rows = store_->Query("SELECT priority, train_flops, job_id, order_key FROM jobs");
  ASSERT_TRUE(rows.ok());
  std::vector<LeaseKey> keys;
  for (const auto& r : rows->rows) {
    std::optional<double> order_key;
    if (std::holds_alternative<double>(r[3])) order_key = std::get<double>(r[3]);
    keys.push_back(
        {std::get<int64_t>(r[0]), std::get<double>(r[1]), std::get<std::string>(r[2]), order_key});
  }
  ASSERT_GT(keys.size(), 100u);
  std::sort(keys.begin(), keys.end(), LeasesBefore);
  for (const LeaseKey& expected : keys) {
    ASSERT_EQ(Lease().job_id, expected.job_id);
  }
  EXPECT_FALSE(scheduler_->Lease(worker_)->grant.has_value());
}

// Steps are checked against the attempt after the fence: a job completes only at
// its last step, reports stay within its steps, a checkpoint is new work of this
// attempt at its own folder. Nothing is written by a refused call.
TEST_F(SchedulerTest, StepsOutsideTheAttemptAreRefusedAndWriteNothing) {
  const LeaseGrant g = Lease();
  const int64_t steps = StepsOf(g);
  ASSERT_GT(steps, 2);
  const auto invalid = [](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  };
  invalid(scheduler_->Complete(g.job_id, g.fencing_token, steps - 1));
  invalid(scheduler_->Complete(g.job_id, g.fencing_token, -1));
  invalid(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, steps + 1).status());
  invalid(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(steps + 1, steps + 1)));
  invalid(scheduler_->ReportCheckpoint(g.job_id, g.fencing_token, steps + 1,
                                       CheckpointPath(g, steps + 1), "c"));
  invalid(scheduler_->ReportCheckpoint(g.job_id, g.fencing_token, 2, "/etc/passwd", "c"));
  invalid(scheduler_->ReportCheckpoint(
      g.job_id, g.fencing_token, 2, "runs/../../" + g.job_id + "/checkpoints/step_00000002", "c"));
  invalid(scheduler_->Fail(g.job_id, g.fencing_token, AttemptEnd::kRetryableError, "x", steps + 1)
              .status());
  EXPECT_EQ(State(g.job_id), JobState::kLeased);
  EXPECT_EQ(MetricRows(g.job_id), 0);
  EXPECT_EQ(store_->Query("SELECT COUNT(*) FROM checkpoints").value().rows[0][0],
            Value(int64_t{0}));
  // The same calls inside the bounds go through.
  ASSERT_TRUE(
      scheduler_->ReportCheckpoint(g.job_id, g.fencing_token, 2, CheckpointPath(g, 2), "c").ok());
  ASSERT_TRUE(scheduler_->Complete(g.job_id, g.fencing_token, steps).ok());
  EXPECT_EQ(State(g.job_id), JobState::kSucceeded);
}

// Issue 30, item 5: an attempt's end is reported where its work stands; a FailJob
// (any reason) at a step below the attempt's last heartbeat goes back and is refused
// like the other regressions, with the job, its attempt and its failures unchanged.
TEST_F(SchedulerTest, AFailureBelowTheLastHeartbeatIsRefusedAndWritesNothing) {
  const LeaseGrant g = Lease();
  const int64_t steps = StepsOf(g);
  ASSERT_GT(steps, 3);
  ASSERT_TRUE(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, 3).ok());
  const auto attempts = [&] {
    return store_
        ->Query("SELECT status, IFNULL(reason, '') FROM attempts WHERE job_id = '" + g.job_id + "'")
        .value()
        .rows;
  };
  const auto before = attempts();
  for (AttemptEnd end :
       {AttemptEnd::kRetryableError, AttemptEnd::kPreempted, AttemptEnd::kDiverged}) {
    const absl::Status s = scheduler_->Fail(g.job_id, g.fencing_token, end, "late", 2).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("FailJob: step 2"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("last heartbeat said 3"));
  }
  EXPECT_EQ(State(g.job_id), JobState::kRunning);
  EXPECT_EQ(attempts(), before);
  EXPECT_EQ(store_->Query("SELECT failures FROM jobs WHERE job_id = '" + g.job_id + "'")
                .value()
                .rows[0][0],
            Value(int64_t{0}));
  // At the heartbeat's step (or later) the same report goes through.
  ASSERT_TRUE(
      scheduler_->Fail(g.job_id, g.fencing_token, AttemptEnd::kRetryableError, "late", 3).ok());
  EXPECT_EQ(State(g.job_id), JobState::kPending);
}

TEST_F(SchedulerTest, AResumedAttemptReportsOnlyCheckpointsAfterItsStart) {
  const LeaseGrant first = Lease();
  ASSERT_TRUE(
      scheduler_
          ->ReportCheckpoint(first.job_id, first.fencing_token, 2, CheckpointPath(first, 2), "c")
          .ok());
  ASSERT_TRUE(
      scheduler_->Fail(first.job_id, first.fencing_token, AttemptEnd::kPreempted, "SIGTERM", 2)
          .ok());
  const LeaseGrant second = Lease();
  ASSERT_EQ(second.job_id, first.job_id);
  ASSERT_EQ(second.resume_step, 2);
  EXPECT_EQ(
      scheduler_
          ->ReportCheckpoint(second.job_id, second.fencing_token, 2, CheckpointPath(second, 2), "c")
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      scheduler_
          ->ReportCheckpoint(second.job_id, second.fencing_token, 3, CheckpointPath(second, 3), "c")
          .ok());
}

TEST_F(SchedulerTest, HeartbeatMovesALeasedJobToRunningAndRenewsTheLease) {
  const LeaseGrant g = Lease();
  clock_.Advance(25);
  EXPECT_EQ(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, 3).value(),
            HeartbeatAction::kContinue);
  EXPECT_EQ(State(g.job_id), JobState::kRunning);
  clock_.Advance(25);  // 50 s after the lease, 25 after the renewal
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 0);
  EXPECT_EQ(State(g.job_id), JobState::kRunning);
}

// The fencing token names the attempt; a heartbeat must also come from the worker
// the lease was granted to (a token copied to another worker is refused and
// renews nothing).
TEST_F(SchedulerTest, AHeartbeatFromAnotherWorkerWithTheRightTokenIsRefused) {
  const LeaseGrant g = Lease();
  const std::string other = scheduler_->RegisterWorker("elsewhere", 1, "").value();
  clock_.Advance(25);
  const absl::Status s = scheduler_->Heartbeat(other, g.job_id, g.fencing_token, 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("is leased to worker '" + worker_ + "'"), std::string::npos) << s;
  EXPECT_EQ(State(g.job_id), JobState::kLeased);  // not renewed, not running
  clock_.Advance(6);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
}

TEST_F(SchedulerTest, ExpiredLeaseGoesBackToPendingWithNextAttempt) {
  const LeaseGrant g = Lease();
  clock_.Advance(31);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  EXPECT_EQ(State(g.job_id), JobState::kPending);
  const LeaseGrant again = Lease();
  EXPECT_EQ(again.job_id, g.job_id);
  EXPECT_EQ(again.attempt, 2);
  EXPECT_GT(again.fencing_token, g.fencing_token);
}

TEST_F(SchedulerTest, ALeaseThatExpiresMaxAttemptsTimesFailsTheJob) {
  std::string id;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const LeaseGrant g = Lease();
    if (id.empty()) id = g.job_id;
    ASSERT_EQ(g.job_id, id);
    clock_.Advance(31);
    ASSERT_EQ(scheduler_->ExpireLeases().value(), 1);
  }
  EXPECT_EQ(State(id), JobState::kFailed);
}

TEST_F(SchedulerTest, PreemptionDoesNotUseUpAnAttempt) {
  std::string id;
  for (int i = 0; i < 5; ++i) {  // more preemptions than max_attempts
    const LeaseGrant g = Lease();
    id = g.job_id;
    EXPECT_EQ(
        scheduler_->Fail(g.job_id, g.fencing_token, AttemptEnd::kPreempted, "SIGTERM").value(),
        JobState::kPending);
  }
  const LeaseGrant g = Lease();
  EXPECT_EQ(g.job_id, id);
  EXPECT_EQ(g.attempt, 6);
  EXPECT_EQ(scheduler_->Fail(g.job_id, g.fencing_token, AttemptEnd::kRetryableError, "oom").value(),
            JobState::kPending);  // the first counted failure of three
}

TEST_F(SchedulerTest, ADivergedJobFailsWithoutRetry) {
  const LeaseGrant g = Lease();
  EXPECT_EQ(scheduler_->Fail(g.job_id, g.fencing_token, AttemptEnd::kDiverged, "nan at 7").value(),
            JobState::kFailed);
}

// A lost reply makes the worker send a batch again: identical rows are
// acknowledged and stored once. A re-send that changes a stored value (the last
// step included) is refused, and the stored value stays.
TEST_F(SchedulerTest, AReSentMetricMustCarryTheValueAlreadyStored) {
  const LeaseGrant g = Lease();
  ASSERT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 3)).ok());
  ASSERT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 3)).ok());
  EXPECT_EQ(MetricRows(g.job_id), 3);
  for (int64_t step : {2, 3}) {
    std::vector<ReportedMetric> changed = Losses(step, step);
    changed[0].value += 0.25;
    const absl::Status s = scheduler_->ReportMetrics(g.job_id, g.fencing_token, changed);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << step << ": " << s;
    EXPECT_NE(s.message().find("a re-send must carry the same value"), std::string::npos) << s;
  }
  const auto rows = store_->Query("SELECT step, value FROM metrics WHERE job_id = '" + g.job_id +
                                  "' AND name = 'train_loss' ORDER BY step");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->rows.size(), 3u);
  EXPECT_EQ(std::get<double>(rows->rows[1][1]), 5.0 - 0.1 * 2);
  EXPECT_EQ(std::get<double>(rows->rows[2][1]), 5.0 - 0.1 * 3);
  EXPECT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(3, 4)).ok());
  EXPECT_EQ(MetricRows(g.job_id), 4);
}

TEST_F(SchedulerTest, EveryWriteWithAStaleTokenIsRefusedAndChangesNothing) {
  const LeaseGrant old = Lease();
  ASSERT_TRUE(scheduler_->ReportMetrics(old.job_id, old.fencing_token, Losses(1, 2)).ok());
  clock_.Advance(31);
  ASSERT_EQ(scheduler_->ExpireLeases().value(), 1);
  const LeaseGrant current = Lease();  // the same job, a new token; rows past step 0 trimmed
  ASSERT_EQ(current.job_id, old.job_id);
  const auto expect_stale = [&](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  };
  expect_stale(scheduler_->Heartbeat(worker_, old.job_id, old.fencing_token, 5).status());
  expect_stale(scheduler_->ReportMetrics(old.job_id, old.fencing_token, Losses(3, 4)));
  expect_stale(
      scheduler_->ReportCheckpoint(old.job_id, old.fencing_token, 4, CheckpointPath(old, 4), "c"));
  expect_stale(scheduler_->Complete(old.job_id, old.fencing_token, StepsOf(old)));
  expect_stale(
      scheduler_->Fail(old.job_id, old.fencing_token, AttemptEnd::kFatalError, "x").status());
  EXPECT_EQ(MetricRows(old.job_id), 0);  // trimmed by the new lease, nothing re-added
  EXPECT_EQ(State(old.job_id), JobState::kLeased);
  EXPECT_TRUE(store_->Query("SELECT * FROM checkpoints").value().rows.empty());
  // The current holder is unaffected.
  EXPECT_TRUE(scheduler_->ReportMetrics(current.job_id, current.fencing_token, Losses(1, 4)).ok());
  EXPECT_TRUE(scheduler_->Complete(current.job_id, current.fencing_token, StepsOf(current)).ok());
  EXPECT_EQ(State(current.job_id), JobState::kSucceeded);
}

TEST_F(SchedulerTest, ResumingFromACheckpointDropsLaterRowsInTheLeaseTransaction) {
  const LeaseGrant first = Lease();
  ASSERT_TRUE(scheduler_->ReportMetrics(first.job_id, first.fencing_token, Losses(1, 8)).ok());
  ASSERT_TRUE(
      scheduler_
          ->ReportCheckpoint(first.job_id, first.fencing_token, 5, CheckpointPath(first, 5), "c")
          .ok());
  EXPECT_EQ(MetricRows(first.job_id), 8);
  ASSERT_EQ(
      scheduler_->Fail(first.job_id, first.fencing_token, AttemptEnd::kRetryableError, "crash")
          .value(),
      JobState::kPending);
  const LeaseGrant second = Lease();
  ASSERT_EQ(second.job_id, first.job_id);
  EXPECT_EQ(second.resume_step, 5);
  EXPECT_EQ(second.resume_checkpoint, CheckpointPath(first, 5));
  EXPECT_EQ(MetricRows(second.job_id), 5);  // steps 6-8 of the first attempt are gone
  // The new attempt re-reports 6-8 and the curve holds each step once.
  ASSERT_TRUE(scheduler_->ReportMetrics(second.job_id, second.fencing_token, Losses(6, 10)).ok());
  EXPECT_EQ(MetricRows(second.job_id), 10);
}

TEST_F(SchedulerTest, ABatchSentAgainAfterALostReplyIsAcceptedOnce) {
  const LeaseGrant g = Lease();
  ASSERT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 5)).ok());
  EXPECT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 5)).ok());
  EXPECT_EQ(MetricRows(g.job_id), 5);
  // A step below the floor that was never stored is still out of order.
  std::vector<ReportedMetric> gap = {{"val_loss", 3, 1.0, 300, 3e6},
                                     {"val_loss", 5, 1.0, 500, 5e6}};
  ASSERT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, {gap[1]}).ok());
  EXPECT_EQ(scheduler_->ReportMetrics(g.job_id, g.fencing_token, {gap[0]}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, ARestartedCoordinatorGivesHeldLeasesAFullTtl) {
  const LeaseGrant g = Lease();
  clock_.Advance(60);  // the coordinator was down for two TTLs
  EXPECT_EQ(scheduler_->GraceLeases().value(), 1);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 0);
  EXPECT_EQ(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, 9).value(),
            HeartbeatAction::kContinue);
  clock_.Advance(31);  // and a lease that is then not renewed still expires
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  // Heard from after the restart, the group's later silence is its own: counted.
  EXPECT_EQ(store_->Query("SELECT failures FROM jobs WHERE job_id = '" + g.job_id + "'")
                .value()
                .rows[0][0],
            Value(int64_t{1}));
}

// A group that gave up on its coordinator (--unreachable-timeout) while the
// coordinator was away never renews its lease: the restarted coordinator ends
// that lease as preempted, not as a counted failure, so coordinator requeues
// cannot use up a job's attempts. A group heard from again is judged as usual.
TEST_F(SchedulerTest, ALeaseWhoseGroupLeftDuringACoordinatorOutageIsNotCounted) {
  const LeaseGrant gone = Lease();
  const LeaseGrant back = Lease();
  clock_.Advance(120);  // the coordinator was requeued and held
  ASSERT_EQ(scheduler_->GraceLeases().value(), 2);
  clock_.Advance(20);
  ASSERT_TRUE(scheduler_->Heartbeat(worker_, back.job_id, back.fencing_token, 3).ok());
  clock_.Advance(11);  // past the grace: the silent lease runs out
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  auto row = [&](const std::string& sql) { return store_->Query(sql).value().rows[0]; };
  const std::string gone_id = "'" + gone.job_id + "'";
  EXPECT_EQ(row("SELECT status, failures FROM jobs WHERE job_id = " + gone_id),
            (std::vector<Value>{Value(std::string("pending")), Value(int64_t{0})}));
  EXPECT_EQ(row("SELECT status FROM attempts WHERE job_id = " + gone_id)[0],
            Value(std::string("preempted")));
  // The other group then falls silent: an ordinary, counted expiry.
  clock_.Advance(31);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  EXPECT_EQ(row("SELECT failures FROM jobs WHERE job_id = '" + back.job_id + "'")[0],
            Value(int64_t{1}));
  // The job that was not counted is leased again under a new token, and its new
  // lease, never graced, is counted when it runs out.
  const LeaseGrant again = Lease();
  ASSERT_EQ(again.job_id, gone.job_id);
  clock_.Advance(31);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  EXPECT_EQ(row("SELECT failures FROM jobs WHERE job_id = " + gone_id)[0], Value(int64_t{1}));
}

// A LeaseJob answer lost on the way (the coordinator stopped after committing
// it) must not cost the job an attempt: the retry, with the same request id, gets
// the same lease back until a heartbeat confirms it, and never extends it.
TEST_F(SchedulerTest, ARetriedLeaseRequestGetsItsLeaseBackUntilConfirmed) {
  auto first = scheduler_->Lease(worker_, "7").value();
  ASSERT_TRUE(first.grant.has_value());
  clock_.Advance(10);
  auto again = scheduler_->Lease(worker_, "7").value();
  ASSERT_TRUE(again.grant.has_value());
  EXPECT_EQ(again.grant->job_id, first.grant->job_id);
  EXPECT_EQ(again.grant->fencing_token, first.grant->fencing_token);
  EXPECT_EQ(again.grant->attempt, 1);
  EXPECT_EQ(store_->Query("SELECT COUNT(*) FROM attempts").value().rows[0][0], Value(int64_t{1}));
  // Not extended: the lease still runs out 30 s after it was first granted.
  clock_.Advance(21);
  EXPECT_EQ(scheduler_->ExpireLeases().value(), 1);
  // The expired job is pending again (and cheapest): the same id now leases it anew.
  const LeaseGrant renewed = *scheduler_->Lease(worker_, "7").value().grant;
  EXPECT_EQ(renewed.job_id, first.grant->job_id);
  EXPECT_EQ(renewed.attempt, 2);

  // Another request id is another request: a second job.
  const LeaseGrant a = *scheduler_->Lease(worker_, "8").value().grant;
  const LeaseGrant b = *scheduler_->Lease(worker_, "9").value().grant;
  EXPECT_NE(a.job_id, b.job_id);
  // Once a heartbeat confirmed the lease, the id makes a new lease.
  ASSERT_TRUE(scheduler_->Heartbeat(worker_, b.job_id, b.fencing_token, 0).ok());
  EXPECT_NE(scheduler_->Lease(worker_, "9").value().grant->job_id, b.job_id);
  // And another group's retry with the same id is not this group's request.
  const std::string other = scheduler_->RegisterWorker("host", 1, "other").value();
  EXPECT_NE(scheduler_->Lease(other, "8").value().grant->job_id, a.job_id);
}

TEST_F(SchedulerTest, AResumedJobGetsAFreshAttemptBudget) {
  std::string id;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    id = Lease().job_id;
    clock_.Advance(31);
    ASSERT_EQ(scheduler_->ExpireLeases().value(), 1);
  }
  ASSERT_EQ(State(id), JobState::kFailed);
  ASSERT_EQ(store_->ResumeSweep("smoke").value(), 1);
  ASSERT_EQ(Lease().job_id, id);
  clock_.Advance(31);
  ASSERT_EQ(scheduler_->ExpireLeases().value(), 1);
  EXPECT_EQ(State(id), JobState::kPending);  // one counted failure of a new three
}

TEST_F(SchedulerTest, ACancelledJobHearsCancelAndCanWriteNothingMore) {
  const LeaseGrant g = Lease();
  ASSERT_EQ(store_->Cancel(g.job_id).value(), 1);
  EXPECT_EQ(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, 1).value(),
            HeartbeatAction::kCancel);
  EXPECT_EQ(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(State(g.job_id), JobState::kCancelled);
  auto attempt = store_->Query("SELECT status FROM attempts WHERE job_id = '" + g.job_id + "'");
  ASSERT_TRUE(attempt.ok());
  EXPECT_EQ(std::get<std::string>(attempt->rows.at(0)[0]), "cancelled");
}

TEST_F(SchedulerTest, MalformedMetricBatchesAreRefusedWhole) {
  const LeaseGrant g = Lease();
  auto bad = Losses(1, 3);
  bad[1].value = std::nan("");
  const auto invalid = [&](const std::vector<ReportedMetric>& m, const char* why) {
    absl::Status s = scheduler_->ReportMetrics(g.job_id, g.fencing_token, m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << why << ": " << s;
  };
  invalid(bad, "non-finite");
  invalid({}, "empty");
  invalid(Losses(1, 101), "oversized");
  auto negative = Losses(1, 2);
  negative[0].step = -1;
  invalid(negative, "negative step");
  EXPECT_EQ(MetricRows(g.job_id), 0);
  ASSERT_TRUE(scheduler_->ReportMetrics(g.job_id, g.fencing_token, Losses(1, 5)).ok());
  invalid({{"train_loss", 9, 1.0, 900, 9e6}, {"train_loss", 7, 1.0, 700, 7e6}}, "going back");
  EXPECT_EQ(MetricRows(g.job_id), 5);
  EXPECT_EQ(scheduler_->ReportMetrics("0000000000000000", 1, Losses(1, 1)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, TheCoordinatorSaysDoneOnlyWhenNothingIsPendingOrRunning) {
  std::vector<LeaseGrant> grants;
  for (int i = 0; i < 8; ++i) grants.push_back(Lease());
  auto idle = scheduler_->Lease(worker_).value();
  EXPECT_FALSE(idle.grant.has_value());
  EXPECT_FALSE(idle.done);  // eight jobs still running
  for (const LeaseGrant& g : grants)
    ASSERT_TRUE(scheduler_->Complete(g.job_id, g.fencing_token, StepsOf(g)).ok());
  EXPECT_TRUE(scheduler_->Lease(worker_).value().done);
}

TEST_F(SchedulerTest, DrainingAnswersDrainAndGrantsNothing) {
  const LeaseGrant g = Lease();
  scheduler_->SetDraining(true);
  EXPECT_EQ(scheduler_->Heartbeat(worker_, g.job_id, g.fencing_token, 1).value(),
            HeartbeatAction::kDrain);
  EXPECT_FALSE(scheduler_->Lease(worker_).value().grant.has_value());
}

TEST_F(SchedulerTest, AGroupOnlyLeasesJobsWhoseBatchSplitsOverItsRanks) {
  // Smoke jobs have 32 sequences per step: a group of 3 ranks cannot split them.
  const std::string three = scheduler_->RegisterWorker("host", 3, "odd").value();
  auto outcome = scheduler_->Lease(three).value();
  EXPECT_FALSE(outcome.grant.has_value());
  const std::string four = scheduler_->RegisterWorker("host", 4, "even").value();
  EXPECT_TRUE(scheduler_->Lease(four).value().grant.has_value());
  EXPECT_EQ(scheduler_->Lease("nobody").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_->RegisterWorker("host", 0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, AMalformedSweepIsRejectedWithItsLineAndWritesNothing) {
  auto r = scheduler_->Submit("name: x\ndata: {synthetic: true}\nfamily: xmod\n", "x.yaml");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("x.yaml:1: scales: missing"));
  EXPECT_EQ(store_->CountStates("").value().size(), 1u);
}

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

JobProgressRow Row(const std::string& status, double flops, int64_t step, int64_t steps) {
  JobProgressRow r;
  r.status = status;
  r.train_flops = flops;
  r.step = step;
  r.steps = steps;
  return r;
}

TEST(Progress, FlopsCountSucceededJobsWholeAndJobsInFlightByTheirStep) {
  const FlopProgress p = SumProgress({Row("succeeded", 100, 10, 10), Row("running", 200, 5, 10),
                                      Row("leased", 50, 0, 10), Row("pending", 400, 0, 10),
                                      Row("failed", 250, 7, 10)});
  EXPECT_DOUBLE_EQ(p.total, 1000);
  EXPECT_DOUBLE_EQ(p.done, 200);  // 100 + half of 200; failed work is not progress
  EXPECT_DOUBLE_EQ(p.Fraction(), 0.2);
  EXPECT_DOUBLE_EQ(FlopProgress{}.Fraction(), 1.0);
}

TEST(Progress, EtaIsTheWorkLeftAtTheWindowsRate) {
  const FlopProgress p{200, 1000};
  EXPECT_DOUBLE_EQ(EtaSeconds(p, 0, 60).value(), 240);    // 200 FLOPs a minute: 800 left
  EXPECT_DOUBLE_EQ(EtaSeconds(p, 100, 60).value(), 480);  // a resumed run: its own rate
  EXPECT_FALSE(EtaSeconds(p, 200, 60).has_value());       // nothing measured yet
  EXPECT_FALSE(EtaSeconds(p, 0, 0).has_value());
  EXPECT_FALSE(EtaSeconds(FlopProgress{1000, 1000}, 0, 60).has_value());  // done
}

// Cooldown branches in the scheduler (issue 14): trunks are leased first; a
// branch waits until its trunk's checkpoint at its start is recorded and its
// first attempt resumes from that checkpoint, with metrics only after it; a
// trunk that ends without that checkpoint takes its waiting branches with it.
TEST(BranchScheduler, BranchesWaitForTheirTrunkCheckpointAndStartFromIt) {
  FakeClock clock;
  SqliteStore::Options o;
  o.path = ":memory:";
  o.clock = &clock;
  auto store = std::move(SqliteStore::Open(o).value());
  Scheduler scheduler(store.get(), SchedulerOptions{});
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/wsd_branches.yaml");
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(scheduler.Submit(text.str(), "wsd_branches.yaml").ok());
  const std::string worker = scheduler.RegisterWorker("host", 1, "").value();
  auto lease = [&]() -> std::optional<LeaseGrant> {
    auto outcome = scheduler.Lease(worker);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    return outcome.ok() ? outcome->grant : std::nullopt;
  };
  auto role = [&](const std::string& id) {
    auto rows =
        store->Query("SELECT role, start_step, parent_id FROM jobs WHERE job_id = '" + id + "'");
    return AsText(Cell(*rows, 0, 0));
  };
  const std::optional<LeaseGrant> t1 = lease(), t2 = lease();
  ASSERT_TRUE(t1.has_value() && t2.has_value());
  EXPECT_EQ(role(t1->job_id), "trunk");
  EXPECT_EQ(role(t2->job_id), "trunk");
  EXPECT_FALSE(lease().has_value());  // every branch waits for a trunk checkpoint

  // The first trunk reaches its first branch point (step 13) and records it.
  auto starts = store->Query("SELECT job_id, start_step FROM jobs WHERE parent_id = '" +
                             t1->job_id + "' ORDER BY start_step");
  ASSERT_TRUE(starts.ok());
  ASSERT_EQ(starts->rows.size(), 3u);
  const std::string first_branch = AsText(Cell(*starts, 0, 0));
  const int64_t start = AsInt(Cell(*starts, 0, 1));
  EXPECT_EQ(start, 13);
  std::vector<ReportedMetric> losses;
  for (int64_t s = 1; s <= start; ++s) losses.push_back({"train_loss", s, 4.0, s * 1024, s * 1e6});
  ASSERT_TRUE(scheduler.ReportMetrics(t1->job_id, t1->fencing_token, losses).ok());
  const std::string path = "runs/" + t1->job_id + "/checkpoints/step_00000013";
  ASSERT_TRUE(scheduler.ReportCheckpoint(t1->job_id, t1->fencing_token, start, path, "c").ok());
  const std::optional<LeaseGrant> b = lease();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->job_id, first_branch);
  EXPECT_EQ(b->resume_step, start);
  EXPECT_EQ(b->resume_checkpoint, path);
  EXPECT_FALSE(lease().has_value());  // the others start later
  // Its metrics start after the trunk's step; a step at or before it is refused.
  EXPECT_FALSE(scheduler
                   .ReportMetrics(b->job_id, b->fencing_token,
                                  {{"train_loss", start, 3.0, start * 1024, 1e6}})
                   .ok());
  EXPECT_TRUE(scheduler
                  .ReportMetrics(b->job_id, b->fencing_token,
                                 {{"train_loss", start + 1, 3.0, (start + 1) * 1024, 1e6}})
                  .ok());

  // The second trunk diverges before any branch point: its branches are cancelled,
  // naming it; the first trunk's other branches still wait.
  ASSERT_EQ(scheduler.Fail(t2->job_id, t2->fencing_token, AttemptEnd::kDiverged, "nan").value(),
            JobState::kFailed);
  auto stranded =
      store->Query("SELECT status, status_reason FROM jobs WHERE parent_id = '" + t2->job_id + "'");
  ASSERT_TRUE(stranded.ok());
  ASSERT_EQ(stranded->rows.size(), 3u);
  for (const auto& row : stranded->rows) {
    EXPECT_EQ(AsText(row[0]), "cancelled");
    EXPECT_THAT(AsText(row[1]), HasSubstr("its trunk " + t2->job_id + " ended failed"));
  }
  EXPECT_EQ(store
                ->Query("SELECT COUNT(*) FROM jobs WHERE parent_id = '" + t1->job_id +
                        "' AND status = 'pending'")
                .value()
                .rows[0][0],
            Value(int64_t{2}));
}

}  // namespace
}  // namespace xmod
