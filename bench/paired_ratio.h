// Ratios of two measurements taken in alternating rounds (A B A B ...), the way
// every xmod benchmark reports a comparison: the machine is shared and noisy, so
// figures taken one after the other can give a ratio that means nothing. Each
// round's A/B is a pairwise ratio; the report is their median and range.
#ifndef XMOD_BENCH_PAIRED_RATIO_H_
#define XMOD_BENCH_PAIRED_RATIO_H_

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace xmod::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct PairedRatio {
  double median = 0.0;  // median over rounds of a[i] / b[i]
  double low = 0.0;     // smallest and largest pairwise ratio
  double high = 0.0;
  int rounds = 0;

  // "0.970 (0.951-0.988 over 5 rounds)"
  std::string Text() const {
    char buffer[96];
    std::snprintf(buffer, sizeof(buffer), "%.3f (%.3f-%.3f over %d rounds)", median, low, high,
                  rounds);
    return buffer;
  }
};

// a[i] and b[i] must come from the same round.
inline PairedRatio Paired(const std::vector<double>& a, const std::vector<double>& b) {
  PairedRatio r;
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (b[i] != 0.0) ratios.push_back(a[i] / b[i]);
  }
  if (ratios.empty()) return r;
  r.median = Median(ratios);
  r.low = *std::min_element(ratios.begin(), ratios.end());
  r.high = *std::max_element(ratios.begin(), ratios.end());
  r.rounds = static_cast<int>(ratios.size());
  return r;
}

}  // namespace xmod::bench

#endif  // XMOD_BENCH_PAIRED_RATIO_H_
