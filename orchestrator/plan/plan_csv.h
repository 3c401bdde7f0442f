// Configurations and measured runs for `xmod plan predict` and `xmod plan
// calibrate`, one per CSV row (docs/planner.md, "Input files"). Required columns:
//   family, d_model, n_layers, n_heads, d_ff, mlp (gelu|swiglu), vocab, seq_len,
//   gpus, gpus_per_node, micro_batch, global_batch (sequences), tp, pp, dp,
//   zero_stage, recompute (none|selective|full), precision (bf16|fp16|fp8|fp32)
// and for measured runs tokens_per_s. Optional: kv_heads, interleave, ep, cp,
// sequence_parallel (0|1), block (gpt|xmod), the family's own (capacity, stride;
// experts, top_k, expert_width, shared, shared_width; thin_width, blocks,
// mol_shared, mol_top_k; softmax_every), and descriptive text columns (name,
// gpu, source, note) that are carried and never read as settings. Any other
// column, an empty required cell or an inconsistent row is refused with its line.
#ifndef XMOD_ORCHESTRATOR_PLAN_PLAN_CSV_H_
#define XMOD_ORCHESTRATOR_PLAN_PLAN_CSV_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/plan/perf_model.h"

namespace xmod {

struct PlanRow {
  std::string where;  // "file:LINE"
  std::string name;   // the name or source column, if any
  PlanModel model;
  Layout layout;
  double tokens_per_s = 0;  // measured rows only
};

// `measured`: tokens_per_s is required (calibration input) or refused (a
// configuration to predict must not carry a measurement it would ignore).
absl::StatusOr<std::vector<PlanRow>> ReadPlanRows(const std::string& path, bool measured);

// The columns, for the docs test and error messages.
std::vector<std::string> PlanRequiredColumns();

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_PLAN_CSV_H_
