#include "orchestrator/plan/layout_search.h"

#include <algorithm>

namespace xmod {

namespace {

std::vector<int64_t> Divisors(int64_t n, int64_t cap) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, cap); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

}  // namespace

LayoutSearchResult SearchLayouts(const PlanModel& model, const ClusterProfile& cluster,
                                 const Efficiency& eff, const LayoutQuery& q) {
  LayoutSearchResult result;
  std::vector<LayoutChoice> fitting;
  const ModelShape& s = model.shape;
  const bool experts = IsExpertFamily(s.family) && s.experts.top_k > 0;
  double least = -1;
  for (const int64_t tp : Divisors(cluster.gpus_per_node, cluster.gpus_per_node)) {
    if (q.gpus % tp != 0) continue;
    for (const int64_t pp : Divisors(q.gpus / tp, s.n_layers)) {
      for (const int64_t cp : Divisors(q.gpus / (tp * pp), 16)) {
        if (cp > 1 && s.context % (2 * cp) != 0) continue;
        const int64_t dp = q.gpus / (tp * pp * cp);
        if (q.global_batch % dp != 0) continue;
        const int64_t per_rank = q.global_batch / dp;
        for (const int64_t micro : Divisors(per_rank, 64)) {
          const int64_t m = per_rank / micro;
          for (const int64_t v : {1, 2, 4}) {
            if (v > 1 && (pp == 1 || m % pp != 0 || s.n_layers < pp * v)) continue;
            for (const int64_t ep :
                 experts ? Divisors(dp, s.experts.experts) : std::vector<int64_t>{1}) {
              if (experts && s.experts.experts % ep != 0) continue;
              for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
                for (const RecomputeMode r :
                     {RecomputeMode::kNone, RecomputeMode::kSelective, RecomputeMode::kFull}) {
                  Layout l;
                  l.gpus = q.gpus;
                  l.gpus_per_node = cluster.gpus_per_node;
                  l.tp = tp;
                  l.pp = pp;
                  l.dp = dp;
                  l.ep = ep;
                  l.cp = cp;
                  l.interleave = v;
                  l.micro_batch = micro;
                  l.global_batch = q.global_batch;
                  l.sequence_parallel = tp > 1;
                  l.zero_stage = zero;
                  l.recompute = r;
                  l.precision = q.precision;
                  if (!CheckLayout(model, l).ok()) continue;
                  ++result.considered;
                  LayoutChoice c{l, Predict(model, l, cluster, eff)};
                  if (least < 0 || c.prediction.memory.total < least) {
                    least = c.prediction.memory.total;
                    result.smallest = c;
                  }
                  if (c.prediction.memory.total > q.memory_share * cluster.hbm_bytes) continue;
                  fitting.push_back(c);
                }
              }
            }
          }
        }
      }
    }
  }
  result.fitting = static_cast<int64_t>(fitting.size());
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const LayoutChoice& a, const LayoutChoice& b) {
                     return a.prediction.step_s < b.prediction.step_s;
                   });
  const size_t keep = std::min<size_t>(fitting.size(), static_cast<size_t>(std::max(1, q.top)));
  result.best.assign(fitting.begin(), fitting.begin() + static_cast<long>(keep));
  return result;
}

}  // namespace xmod
