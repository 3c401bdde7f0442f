#include "orchestrator/rules/lease_rules.h"

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
      {0, 5.0, "b"}, {0, 5.0, "a"}, {1, 9.0, "z"}, {0, 1.0, "y"}, {2, 100.0, "x"}, {1, 3.0, "w"},
  };
  std::sort(keys.begin(), keys.end(), LeasesBefore);
  std::vector<std::string> order;
  for (const LeaseKey& k : keys) order.push_back(k.job_id);
  EXPECT_EQ(order, (std::vector<std::string>{"x", "w", "z", "y", "a", "b"}));
  EXPECT_FALSE(LeasesBefore(keys[0], keys[0]));  // a strict order
}

}  // namespace
}  // namespace xmod
