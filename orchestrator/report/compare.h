// `xmod compare SWEEP_A SWEEP_B` (docs/results.md): the configurations two
// sweeps share, with each one's seed-mean loss and the difference B - A with its
// standard error.
#ifndef XMOD_ORCHESTRATOR_REPORT_COMPARE_H_
#define XMOD_ORCHESTRATOR_REPORT_COMPARE_H_

#include <string>
#include <vector>

#include "orchestrator/store/rows.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

struct SweepComparison {
  // One row per shared configuration: family, scale, sparsity, stride, context,
  // budget_kind, budget_value, seeds_a, loss_a, seeds_b, loss_b, diff (B - A),
  // diff_se, z (diff / diff_se), se_from ("seeds" when both sides have two or
  // more seeds, else "eval": a side with one seed contributes its evaluation SE).
  QueryResult table;
  // The settings that are constant within each sweep but differ between them
  // ("train.lr: 0.01 -> 0.02"): what the comparison measures. They are left out
  // of the match; every other setting of the job's configuration must be equal.
  std::vector<std::string> differences;
  int64_t shared = 0, only_a = 0, only_b = 0;
  // Over the shared configurations: the mean difference, its standard error
  // across configurations (0 with fewer than two) and how many favour B (lower loss).
  double mean_diff = 0.0, mean_diff_se = 0.0;
  int64_t b_lower = 0;
};

// Compares the succeeded runs (cooldown trunks left out) of two sweeps by the
// loss the laws read (JobResultRow::Loss("auto")).
SweepComparison CompareSweeps(const std::vector<JobResultRow>& a,
                              const std::vector<JobResultRow>& b);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_REPORT_COMPARE_H_
