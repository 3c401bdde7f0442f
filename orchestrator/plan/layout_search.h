// `xmod plan layout` (docs/planner.md, "Layout search"): the fastest parallel
// layout that fits a model on a number of GPUs at a global batch, by enumeration
// of every layout the model and the cluster allow:
//   tp  a divisor of the GPUs per node that divides the heads (and K/V heads)
//       and d_ff; sequence parallelism with it;
//   pp  a divisor of GPUs / tp, at most the layer count; v ∈ {1, 2, 4} chunks
//       when pp > 1 and the micro-batches are a multiple of pp;
//   cp  a divisor of GPUs / (tp · pp) up to 16 that splits the context into
//       2 · cp chunks (context parallelism);
//   dp  the rest, dividing the global batch; ep a divisor of dp and of the
//       experts (top-k MoE only);
//   the micro-batch a divisor of the global batch per data rank, up to 64;
//   ZeRO stage 0-3 (0 alone without data parallelism); recomputation none,
//   selective or full.
// A layout fits when its memory is at most `memory_share` of the device. Ties in
// step time go to less sharding and less recomputation (the order enumerated).
#ifndef XMOD_ORCHESTRATOR_PLAN_LAYOUT_SEARCH_H_
#define XMOD_ORCHESTRATOR_PLAN_LAYOUT_SEARCH_H_

#include <cstdint>
#include <vector>

#include "orchestrator/plan/perf_model.h"

namespace xmod {

struct LayoutQuery {
  int64_t gpus = 8;
  int64_t global_batch = 0;  // sequences per step
  Precision precision = Precision::kBf16;
  double memory_share = 0.9;
  int top = 5;  // the best and this many runners-up, at most
};

struct LayoutChoice {
  Layout layout;
  Prediction prediction;
};

struct LayoutSearchResult {
  std::vector<LayoutChoice> best;  // fastest first; empty if none fits
  int64_t considered = 0;          // layouts the model and cluster allow
  int64_t fitting = 0;             // of those, within the memory share
  LayoutChoice smallest;           // the least memory of all (to say why none fits)
};

LayoutSearchResult SearchLayouts(const PlanModel& model, const ClusterProfile& cluster,
                                 const Efficiency& eff, const LayoutQuery& query);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_LAYOUT_SEARCH_H_
