// Co-design (docs/planner.md, "Co-design"): which architecture to train with a
// budget of GPU-hours on a cluster, MOSAIC's question. For each candidate (a
// configuration a sweep's fitted law can predict, at a model size), the fastest
// layout that fits (layout_search.h), the tokens D that the GPU-hours buy at its
// throughput, and the predicted loss at D with its interval over the law's
// bootstrap refits; the wall-clock optimum and the Pareto set over (loss, total
// parameters, memory per GPU). Beside it, the FLOPs-only optimum: every
// candidate gets the same model FLOPs C (the GPU-hours at the peak times one
// reference MFU, the wall-clock optimum's), D = C / (model FLOPs per token),
// as a scaling law with no systems model would rank them. Where the two optima
// differ, the constraint that separates them is named: memory (the FLOPs-only
// optimum does not fit, or only with recomputation or sharding that costs it
// throughput) or the part of its step time that grows most per model FLOP
// (expert all-to-all, data-parallel traffic, pipeline bubble, small matrix
// multiplications).
#ifndef XMOD_ORCHESTRATOR_PLAN_CODESIGN_H_
#define XMOD_ORCHESTRATOR_PLAN_CODESIGN_H_

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/law.h"
#include "orchestrator/plan/layout_search.h"

namespace xmod {

struct CodesignCandidate {
  std::string name;  // "moe E/k=8 d=2048"
  std::string configuration;
  PlanModel model;
  LawPoint point;  // the law's view (n = N_active, n_total, routing fields); d is set per plan
};

// The predicted loss at a point: the full fit's and each refit's (nats).
struct LossPrediction {
  double loss = 0;
  std::vector<double> refits;
};
using LossModel = std::function<absl::StatusOr<LossPrediction>(const LawPoint&)>;

struct CodesignOptions {
  double gpu_hours = 0;
  int64_t gpus = 8;
  int64_t global_batch = 0;  // sequences per step
  Precision precision = Precision::kBf16;
  double confidence = 0.95;
};

struct CodesignRow {
  CodesignCandidate candidate;
  bool fits = false;
  LayoutChoice layout;  // the best that fits (or the smallest, when none does)
  double n_active = 0, n_total = 0;
  double tokens = 0;  // D the GPU-hours buy (wall-clock view)
  double loss = 0, low = 0, high = 0;
  double flops_only_tokens = 0;  // D = C / model FLOPs per token
  double flops_only_loss = 0;
  bool pareto = false;
};

struct CodesignResult {
  std::vector<CodesignRow> rows;
  int best = -1;             // wall-clock optimum (lowest loss among those that fit)
  int flops_best = -1;       // FLOPs-only optimum
  double model_flops = 0;    // C of the FLOPs-only view
  double reference_mfu = 0;  // the MFU that turns GPU-hours into C
  double p_best = 0;         // share of refits in which `best` has the lowest loss
  std::string constraint;    // why the two optima differ ("" when they agree)
};

absl::StatusOr<CodesignResult> Codesign(const std::vector<CodesignCandidate>& candidates,
                                        const LossModel& loss, const ClusterProfile& cluster,
                                        const Efficiency& eff, const CodesignOptions& options);

nlohmann::json CodesignJson(const CodesignResult& r);

// Draws both views' predicted losses per candidate to an SVG with gnuplot; its
// data (.dat), script (.gp) and gnuplot's messages (.log) are written beside it.
absl::Status DrawCodesign(const CodesignResult& r, const std::string& svg);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_CODESIGN_H_
