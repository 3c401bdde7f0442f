#include "common/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace xmod {

double Mean(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m += x / static_cast<double>(v.size());
  return m;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double SampleSd(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double mean = Mean(v);
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double Share(int k, int n) { return n > 0 ? static_cast<double>(k) / n : 0.0; }

double BinomialSe(double p, int n) {
  return n > 0 ? std::sqrt(p * (1.0 - p) / n) : std::numeric_limits<double>::infinity();
}

}  // namespace xmod
