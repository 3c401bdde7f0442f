#include "orchestrator/report/views.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace xmod {

namespace {

// (N, training FLOPs per token) of each dense scale among `done`, the mean over
// its contexts, by ascending N.
std::vector<std::pair<double, double>> DenseFlopsPerToken(const std::vector<JobResultRow>& done) {
  std::map<double, std::pair<double, int>> per_n;
  for (const JobResultRow& j : done) {
    if (j.routed()) continue;
    per_n[j.n_active].first += j.flops_per_token;
    per_n[j.n_active].second += 1;
  }
  std::vector<std::pair<double, double>> nf;
  for (const auto& [n, sum] : per_n) nf.push_back({n, sum.first / sum.second});
  return nf;
}

std::vector<LawLine> DenseLawLines(const LossAt& law,
                                   const std::vector<std::pair<double, double>>& nf, double c_min,
                                   double c_max) {
  std::vector<LawLine> lines;
  for (const auto& [n, f] : nf) {
    LawLine line{n, {}};
    for (int i = 0; i <= 80; ++i) {
      const double c = c_min / 3.0 * std::pow(9.0 * c_max / c_min, i / 80.0);
      line.points.push_back({c, law(n, c / f)});
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

std::vector<IsoFlopProfile> IsoFlopProfiles(const LossAt& law,
                                            const std::vector<std::pair<double, double>>& nf,
                                            double c_min, double c_max) {
  std::vector<IsoFlopProfile> profiles;
  // FLOPs per token at any N: log-log interpolation between the scales, the end
  // segments extended.
  auto flops_at = [&](double n) {
    if (nf.size() == 1) return nf[0].second * n / nf[0].first;
    size_t i = 1;
    while (i + 1 < nf.size() && n > nf[i].first) ++i;
    const double x0 = std::log(nf[i - 1].first), x1 = std::log(nf[i].first);
    const double y0 = std::log(nf[i - 1].second), y1 = std::log(nf[i].second);
    return std::exp(y0 + (std::log(n) - x0) * (y1 - y0) / (x1 - x0));
  };
  const double n_lo = nf.front().first / 4.0, n_hi = nf.back().first * 4.0;
  const int budgets = 4;
  for (int b = 0; b < budgets; ++b) {
    IsoFlopProfile p;
    p.flops = c_min * std::pow(c_max / c_min, b / static_cast<double>(budgets - 1));
    p.lowest = {n_lo, 1e300};
    for (int i = 0; i <= 120; ++i) {
      const double n = n_lo * std::pow(n_hi / n_lo, i / 120.0);
      const double l = law(n, p.flops / flops_at(n));
      if (l < p.lowest.second) p.lowest = {n, l};
      p.points.push_back({n, l});
    }
    profiles.push_back(std::move(p));
  }
  return profiles;
}

}  // namespace

LossAt DenseLoss(double e, double a, double b, double alpha, double beta) {
  return [=](double n, double d) { return e + a / std::pow(n, alpha) + b / std::pow(d, beta); };
}

DenseLawView DenseLawViews(const LossAt& law, const std::vector<JobResultRow>& done) {
  const std::vector<std::pair<double, double>> nf = DenseFlopsPerToken(done);
  if (nf.empty()) return {};
  double c_min = 1e300, c_max = 0.0;
  for (const JobResultRow& j : done) {
    c_min = std::min(c_min, j.train_flops);
    c_max = std::max(c_max, j.train_flops);
  }
  return {DenseLawLines(law, nf, c_min, c_max), IsoFlopProfiles(law, nf, c_min, c_max)};
}

std::vector<RelativeToDensePoint> RelativeToDense(const std::vector<JobResultRow>& done) {
  using Key = std::tuple<std::string, int64_t, std::string, double, int64_t>;
  std::map<Key, const JobResultRow*> dense;
  for (const JobResultRow& j : done) {
    if (!j.routed() && j.final_val_loss.has_value()) {
      dense[{j.scale, j.context, j.budget_kind, j.budget_value, j.seed}] = &j;
    }
  }
  std::vector<RelativeToDensePoint> out;
  for (const JobResultRow& j : done) {
    if (!j.routed()) continue;
    auto it = dense.find({j.scale, j.context, j.budget_kind, j.budget_value, j.seed});
    const std::optional<double> loss = j.Loss("auto");
    if (it == dense.end() || !loss.has_value()) continue;
    RelativeToDensePoint p;
    p.job_id = j.id;
    p.dense_job_id = it->second->id;
    p.sparsity = j.sparsity;
    p.stride = j.stride;
    p.series = FamilySeries(j.family, {j.capacity, j.stride, j.experts, j.top_k, j.sparsity});
    // A baseline sized against an X-MoD point (moe) is plotted at that point's sparsity.
    double matched = 0.0;
    int64_t matched_stride = 0;
    if (j.MatchedXmodPoint(&matched, &matched_stride)) p.sparsity = matched;
    p.relative_pct = 100.0 * (*loss / *it->second->final_val_loss - 1.0);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace xmod
