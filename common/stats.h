// Summary statistics of a sample, written once for every reader (the fits, the
// advice, the pairs, the planner, the power check).
#ifndef XMOD_COMMON_STATS_H_
#define XMOD_COMMON_STATS_H_

#include <vector>

namespace xmod {

// The arithmetic mean; 0 for an empty sample.
double Mean(const std::vector<double>& v);

// The median (the mean of the two middle values of an even sample); 0 for an
// empty sample.
double Median(std::vector<double> v);

// The q-quantile with linear interpolation between order statistics (R's type 7,
// NumPy's default); NaN for an empty sample.
double Quantile(std::vector<double> v, double q);

// The sample standard deviation (n - 1 in the denominator); 0 below two values.
double SampleSd(const std::vector<double>& v);

// k of n as a share; 0 when n is 0.
double Share(int k, int n);

// The binomial standard error of a share p over n trials; +inf when n is 0.
double BinomialSe(double p, int n);

}  // namespace xmod

#endif  // XMOD_COMMON_STATS_H_
