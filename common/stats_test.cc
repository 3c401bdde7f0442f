// The summary statistics (stats.h) on samples small enough to check by hand, and
// their empty-sample values.
#include "common/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xmod {
namespace {

TEST(Stats, MatchHandComputedValues) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Mean(v), 2.5);
  EXPECT_DOUBLE_EQ(Median(v), 2.5);
  EXPECT_DOUBLE_EQ(Median({5, 1, 3}), 3.0);
  // Type 7: position q (n - 1) = 0.25 * 3 = 0.75 between 1 and 2.
  EXPECT_DOUBLE_EQ(Quantile(v, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 4.0);
  // Deviations -1.5, -0.5, 0.5, 1.5: 5 / 3.
  EXPECT_DOUBLE_EQ(SampleSd(v), std::sqrt(5.0 / 3.0));
  EXPECT_DOUBLE_EQ(Share(3, 4), 0.75);
  EXPECT_DOUBLE_EQ(BinomialSe(0.5, 100), 0.05);
}

TEST(Stats, EmptyAndSingleSamplesHaveStatedValues) {
  EXPECT_EQ(Mean({}), 0.0);
  EXPECT_EQ(Median({}), 0.0);
  EXPECT_TRUE(std::isnan(Quantile({}, 0.5)));
  EXPECT_EQ(SampleSd({3.0}), 0.0);
  EXPECT_DOUBLE_EQ(Quantile({3.0}, 0.9), 3.0);
  EXPECT_EQ(Share(1, 0), 0.0);
  EXPECT_TRUE(std::isinf(BinomialSe(0.5, 0)));
}

}  // namespace
}  // namespace xmod
