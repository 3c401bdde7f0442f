#include "worker/data/batches.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace xmod {
namespace {

TEST(Batches, TheRowsOfOneRankEqualTheRowsOfTwoRanksTogether) {
  auto source = MakeSyntheticSource(3, 64, 1 << 15, 1 << 12);
  for (int64_t step : {1, 2, 17}) {
    Batch all = TrainBatch(*source, 99, step, 0, 8, 32);
    Batch first = TrainBatch(*source, 99, step, 0, 4, 32);
    Batch second = TrainBatch(*source, 99, step, 4, 8, 32);
    EXPECT_TRUE(torch::equal(all.inputs, torch::cat({first.inputs, second.inputs})));
    EXPECT_TRUE(torch::equal(all.targets, torch::cat({first.targets, second.targets})));
  }
}

TEST(Batches, TargetsAreInputsShiftedByOne) {
  auto source = MakeSyntheticSource(3, 64, 1 << 15, 1 << 12);
  Batch b = TrainBatch(*source, 1, 5, 0, 3, 16);
  EXPECT_TRUE(torch::equal(b.inputs.narrow(1, 1, 15), b.targets.narrow(1, 0, 15)));
}

TEST(Batches, WindowsDependOnSeedStepAndRowAndStayInRange) {
  std::set<int64_t> starts;
  for (int64_t step = 0; step < 50; ++step) {
    for (int64_t row = 0; row < 20; ++row) {
      const int64_t s = TrainWindowStart(7, step, row, 1000, 64);
      EXPECT_GE(s, 0);
      EXPECT_LE(s + 64 + 1, 1000);
      starts.insert(s);
    }
  }
  EXPECT_GT(starts.size(), 500u);  // 1000 draws over 936 starts: mostly distinct
  EXPECT_EQ(TrainWindowStart(7, 3, 4, 1000, 64), TrainWindowStart(7, 3, 4, 1000, 64));
  EXPECT_NE(TrainWindowStart(7, 3, 4, 1000, 64), TrainWindowStart(8, 3, 4, 1000, 64));
}

TEST(Batches, ValidationWindowsAreFixedAndSpanTheStream) {
  const auto starts = ValWindowStarts(10000, 100, 5);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 2474, 4949, 7424, 9899}));
  EXPECT_EQ(ValWindowStarts(150, 100, 80).size(), 50u);  // no more windows than starts
}

TEST(Batches, TheWholeSplitIsEveryNonOverlappingWindowFromTheStart) {
  EXPECT_EQ(ValWindowStartsWhole(401, 100), (std::vector<int64_t>{0, 100, 200, 300}));
  EXPECT_EQ(ValWindowStartsWhole(400, 100),
            (std::vector<int64_t>{0, 100, 200}));  // 300 + 101 > 400
  EXPECT_TRUE(ValWindowStartsWhole(100, 100).empty());
}

TEST(Batches, SyntheticSourceIsDeterministicAndLearnable) {
  auto a = MakeSyntheticSource(5, 64, 4096, 1024);
  auto b = MakeSyntheticSource(5, 64, 4096, 1024);
  std::vector<int64_t> x(4096), y(4096);
  a->CopyTrain(0, 4096, x.data());
  b->CopyTrain(0, 4096, y.data());
  EXPECT_EQ(x, y);
  // Given the previous token, at most four next tokens ever follow.
  std::map<int64_t, std::set<int64_t>> next;
  for (size_t i = 1; i < x.size(); ++i) {
    EXPECT_LT(x[i], 64);
    next[x[i - 1]].insert(x[i]);
  }
  for (const auto& [pair, successors] : next) EXPECT_LE(successors.size(), 4u);
}

}  // namespace
}  // namespace xmod
