#include "common/job_state.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace xmod {
namespace {

using S = JobState;

TEST(JobState, OnlyTheDesignedTransitionsAreLegal) {
  const std::set<std::pair<S, S>> legal = {
      {S::kPending, S::kLeased},    {S::kPending, S::kCancelled}, {S::kLeased, S::kRunning},
      {S::kLeased, S::kPending},    {S::kLeased, S::kFailed},     {S::kLeased, S::kCancelled},
      {S::kRunning, S::kSucceeded}, {S::kRunning, S::kPending},   {S::kRunning, S::kFailed},
      {S::kRunning, S::kCancelled}, {S::kFailed, S::kPending},    {S::kCancelled, S::kPending}};
  for (S from : kAllJobStates) {
    for (S to : kAllJobStates) {
      EXPECT_EQ(IsLegalTransition(from, to), legal.count({from, to}) == 1)
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
}

TEST(JobState, NamesRoundTrip) {
  for (S s : kAllJobStates) EXPECT_EQ(ParseJobState(JobStateName(s)).value(), s);
  EXPECT_FALSE(ParseJobState("done").ok());
}

}  // namespace
}  // namespace xmod
