// The comparison views of a sweep as data: the dense law against training FLOPs,
// its isoFLOP profiles, and each sparse run relative to its FLOP-matched dense run.
// `xmod plot` draws them with gnuplot and the dashboard's /api/compare serves
// them, from the same functions.
#ifndef XMOD_ORCHESTRATOR_REPORT_VIEWS_H_
#define XMOD_ORCHESTRATOR_REPORT_VIEWS_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/report/report.h"

namespace xmod {

// A law's loss (nats) at N non-embedding parameters and D training tokens.
using LossAt = std::function<double(double n, double d)>;

// The dense law L = E + A / N^alpha + B / D^beta (docs/laws.md).
LossAt DenseLoss(double e, double a, double b, double alpha, double beta);

// The law's loss against training FLOPs C at one dense scale's N (D = C / that
// scale's training FLOPs per token, the mean over its contexts), 81 points
// log-spaced over [c_min / 3, 3 c_max].
struct LawLine {
  double n = 0.0;
  std::vector<std::pair<double, double>> points;  // (C, loss)
};

// The law's isoFLOP profile at budget C: loss against N (121 points log-spaced
// over [N_min / 4, 4 N_max]) with D = C / FLOPs per token at N (log-log
// interpolation between the dense scales), and the lowest point on that range.
struct IsoFlopProfile {
  double flops = 0.0;
  std::vector<std::pair<double, double>> points;  // (N, loss)
  std::pair<double, double> lowest;               // (N, loss)
};

// A dense law drawn over the runs `done`: a line at each of their dense scales,
// and isoFLOP profiles at four budgets log-spaced from their cheapest to their
// dearest training FLOPs (c_min, c_max). Both empty when `done` has no dense run.
struct DenseLawView {
  std::vector<LawLine> lines;
  std::vector<IsoFlopProfile> isoflop;
};
DenseLawView DenseLawViews(const LossAt& law, const std::vector<JobResultRow>& done);

// A sparse run beside the dense run of the same scale, context, budget and seed
// (same initialisation and batch order): 100 (L_sparse / L_dense - 1), losses as
// the laws read them (causal for routed runs).
struct RelativeToDensePoint {
  std::string series;  // "X-MoD, stride s=4", "MoD baseline (s=2)", "MoE baseline ...", ...
  std::string job_id, dense_job_id;
  double sparsity = 0.0;  // a MoE baseline: its X-MoD point's sparsity
  int64_t stride = 1;
  double relative_pct = 0.0;
};
std::vector<RelativeToDensePoint> RelativeToDense(const std::vector<JobResultRow>& done);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_REPORT_VIEWS_H_
