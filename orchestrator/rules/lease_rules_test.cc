#include "orchestrator/rules/lease_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace xmod {
namespace {

using S = JobState;
using E = AttemptEnd;

TEST(LeaseRules, EveryEndOfAnAttemptHasItsVerdict) {
  struct Row {
    S from;
    E end;
    int64_t failures, max_attempts;
    S to, via;
    int64_t failures_after;
    const char* attempt_status;
  };
  const Row table[] = {
      // Success: a job that never heartbeated passes through running.
      {S::kRunning, E::kSucceeded, 0, 3, S::kSucceeded, S::kRunning, 0, "succeeded"},
      {S::kLeased, E::kSucceeded, 1, 3, S::kSucceeded, S::kRunning, 1, "succeeded"},
      // Preemption never counts, even with the budget spent.
      {S::kRunning, E::kPreempted, 2, 3, S::kPending, S::kRunning, 2, "preempted"},
      {S::kLeased, E::kPreempted, 5, 1, S::kPending, S::kLeased, 5, "preempted"},
      // A retryable error counts and retries while attempts remain.
      {S::kRunning, E::kRetryableError, 0, 3, S::kPending, S::kRunning, 1, "failed"},
      {S::kRunning, E::kRetryableError, 1, 3, S::kPending, S::kRunning, 2, "failed"},
      {S::kRunning, E::kRetryableError, 2, 3, S::kFailed, S::kRunning, 3, "failed"},
      {S::kLeased, E::kRetryableError, 0, 1, S::kFailed, S::kLeased, 1, "failed"},
      // Fatal errors and divergence fail at once, whatever the budget.
      {S::kRunning, E::kFatalError, 0, 9, S::kFailed, S::kRunning, 1, "failed"},
      {S::kLeased, E::kFatalError, 0, 9, S::kFailed, S::kLeased, 1, "failed"},
      {S::kRunning, E::kDiverged, 0, 9, S::kFailed, S::kRunning, 1, "diverged"},
  };
  for (const Row& r : table) {
    auto v = DecideAttemptEnd(r.from, r.end, r.failures, r.max_attempts);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->to, r.to) << JobStateName(r.from) << " " << static_cast<int>(r.end);
    EXPECT_EQ(v->via, r.via);
    EXPECT_EQ(v->failures, r.failures_after);
    EXPECT_EQ(v->attempt_status, r.attempt_status);
  }
}

TEST(LeaseRules, OnlyAHeldJobHasAnAttemptToEnd) {
  for (S from : {S::kPending, S::kSucceeded, S::kFailed, S::kCancelled}) {
    for (E end : {E::kSucceeded, E::kPreempted, E::kRetryableError, E::kFatalError, E::kDiverged}) {
      EXPECT_EQ(DecideAttemptEnd(from, end, 0, 3).status().code(),
                absl::StatusCode::kFailedPrecondition)
          << JobStateName(from);
    }
  }
}

TEST(LeaseRules, StateClasses) {
  EXPECT_EQ(StatesWhere(IsHeld), (std::vector<S>{S::kLeased, S::kRunning}));
  EXPECT_EQ(StatesWhere(IsActive), (std::vector<S>{S::kPending, S::kLeased, S::kRunning}));
  EXPECT_EQ(StatesWhere(IsResumable), (std::vector<S>{S::kFailed, S::kCancelled}));
  EXPECT_EQ(StatesWhere(IsCancellable), (std::vector<S>{S::kPending, S::kLeased, S::kRunning}));
  // Resume and cancel only make moves the state machine allows.
  for (S s : StatesWhere(IsResumable)) EXPECT_TRUE(IsLegalTransition(s, S::kPending));
  for (S s : StatesWhere(IsCancellable)) EXPECT_TRUE(IsLegalTransition(s, S::kCancelled));
  EXPECT_TRUE(ResetsFailures(S::kPending));
  EXPECT_FALSE(ResetsFailures(S::kCancelled));
  EXPECT_TRUE(ClosesAttempt(S::kRunning, S::kCancelled));
  EXPECT_TRUE(ClosesAttempt(S::kLeased, S::kCancelled));
  EXPECT_FALSE(ClosesAttempt(S::kPending, S::kCancelled));
  EXPECT_FALSE(ClosesAttempt(S::kFailed, S::kPending));
}

TEST(LeaseRules, ABatchFitsGroupsWhoseRanksDivideItsSequences) {
  struct Row {
    int64_t batch_tokens, context, ranks;
    bool fits;
  };
  const Row table[] = {
      {4096, 256, 1, true},   {4096, 256, 2, true},  {4096, 256, 16, true}, {4096, 256, 3, false},
      {4096, 256, 32, false}, {768, 256, 3, true},   {768, 256, 2, false},  {0, 256, 1, false},
      {4096, 0, 1, false},    {4096, 256, 0, false},
  };
  for (const Row& r : table) {
    EXPECT_EQ(BatchSplitsOver(r.batch_tokens, r.context, r.ranks), r.fits)
        << r.batch_tokens << "/" << r.context << " over " << r.ranks;
  }
}

TEST(LeaseRules, LeaseOrderIsPriorityThenCheapestThenId) {
  std::vector<LeaseKey> keys = {
      {0, 5.0, "b", {}}, {0, 5.0, "a", {}},   {1, 9.0, "z", {}},
      {0, 1.0, "y", {}}, {2, 100.0, "x", {}}, {1, 3.0, "w", {}},
  };
  std::sort(keys.begin(), keys.end(), LeasesBefore);
  std::vector<std::string> order;
  for (const LeaseKey& k : keys) order.push_back(k.job_id);
  EXPECT_EQ(order, (std::vector<std::string>{"x", "w", "z", "y", "a", "b"}));
  EXPECT_FALSE(LeasesBefore(keys[0], keys[0]));  // a strict order
}

// An order key (the law-driven order) stands in for the job's FLOPs within its
// priority; it never lifts a job over a higher priority.
TEST(LeaseRules, AnOrderKeyTakesThePlaceOfTheFlops) {
  std::vector<LeaseKey> keys = {
      {0, 1.0, "a", 8.0}, {0, 5.0, "b", {}}, {0, 9.0, "c", 2.0},
      {1, 50.0, "d", {}}, {0, 2.0, "e", {}},
  };
  std::sort(keys.begin(), keys.end(), LeasesBefore);
  std::vector<std::string> order;
  for (const LeaseKey& k : keys) order.push_back(k.job_id);
  EXPECT_EQ(order, (std::vector<std::string>{"d", "c", "e", "b", "a"}));
}

TEST(LeaseRules, ReportedStepsNeverGoBackOrBeyondTheJob) {
  // 100 steps, resumed from the checkpoint at 40, heartbeats said 55, checkpointed at 50.
  const AttemptSteps attempt{100, 40, 55, 50};
  struct Row {
    StepReport kind;
    int64_t step;
    bool ok;
  };
  const Row table[] = {
      {StepReport::kHeartbeat, 55, true},   {StepReport::kHeartbeat, 100, true},
      {StepReport::kHeartbeat, 54, false},  {StepReport::kHeartbeat, 101, false},
      {StepReport::kHeartbeat, -1, false},  {StepReport::kMetric, 41, true},
      {StepReport::kMetric, 100, true},     {StepReport::kMetric, 40, false},
      {StepReport::kMetric, 0, false},      {StepReport::kMetric, 101, false},
      {StepReport::kCheckpoint, 50, true},  {StepReport::kCheckpoint, 60, true},
      {StepReport::kCheckpoint, 100, true}, {StepReport::kCheckpoint, 49, false},
      {StepReport::kCheckpoint, 40, false}, {StepReport::kCheckpoint, 101, false},
      {StepReport::kComplete, 100, true},   {StepReport::kComplete, 99, false},
      {StepReport::kComplete, 0, false},    {StepReport::kComplete, -5, false},
      {StepReport::kComplete, 101, false},  {StepReport::kFailure, 55, true},
      {StepReport::kFailure, 100, true},    {StepReport::kFailure, 54, false},
      {StepReport::kFailure, 40, false},    {StepReport::kFailure, 39, false},
      {StepReport::kFailure, 101, false},
  };
  for (const Row& r : table) {
    const absl::Status s = CheckReportedStep("Rpc", r.kind, r.step, attempt);
    EXPECT_EQ(s.ok(), r.ok) << static_cast<int>(r.kind) << " at " << r.step << ": " << s;
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("Rpc: "));
    }
  }
  // A fresh attempt: the first beat may come before any step.
  EXPECT_TRUE(CheckReportedStep("Rpc", StepReport::kHeartbeat, 0, {10, 0, 0, 0}).ok());
  EXPECT_TRUE(CheckReportedStep("Rpc", StepReport::kFailure, 0, {10, 0, 0, 0}).ok());
}

TEST(LeaseRules, ACheckpointPathNamesThisJobsFolderAndStaysInsideIt) {
  const std::string id = "0123456789abcdef";
  for (const std::string& good :
       {"runs/" + id + "/checkpoints/step_00000040",
        "/nfs/runs/" + id + "/checkpoints/step_00000040",
        "./runs//" + id + "/checkpoints/step_00000040", id + "/checkpoints/step_00000040"}) {
    EXPECT_TRUE(CheckCheckpointPath(id, 40, good).ok()) << good;
  }
  for (const std::string& bad : {
           "runs/../../etc/" + id + "/checkpoints/step_00000040",           // escapes with ..
           std::string("/etc/passwd"),                                      // not a checkpoint
           "runs/" + id + "/checkpoints/step_00000041",                     // another step
           std::string("runs/ffffffffffffffff/checkpoints/step_00000040"),  // another job
           "runs/x" + id + "/checkpoints/step_00000040",                    // a longer folder name
           "runs/" + id + "/checkpoints/step_00000040/..",
       }) {
    const absl::Status s = CheckCheckpointPath(id, 40, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace xmod
