// The performance model of the planner (docs/planner.md): how long one
// training step of a model takes on a cluster under a parallel layout, split
// into compute, pipeline bubble and each exposed communication, with MFU, HFU
// and the memory of one rank (common/memory.h's EstimateParallelMemory: one
// memory model for the worker and the planner). Torch-free and analytical:
// every layer of every family is a list of operations, each timed as
//   a matrix multiplication   F / (peak · ε(F)),  ε(F) = ε_max · F / (F + F_half)
//   fused attention           F / (peak · ε_attn) (half the product when causal)
//   a memory-bound kernel     bytes / (HBM bandwidth · ε_mem)
//   a kernel launch           kernel_s
//   a collective              its ring volume / (link bandwidth · ε_link) + latency
// with the efficiencies of cluster.h's Efficiency, which calibration fits.
#ifndef XMOD_ORCHESTRATOR_PLAN_PERF_MODEL_H_
#define XMOD_ORCHESTRATOR_PLAN_PERF_MODEL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "common/accounting.h"
#include "common/memory.h"
#include "orchestrator/plan/cluster.h"

namespace xmod {

// A model to plan: xmod's shape (every family), the block style and, for the
// GPT style, its MLP and grouped-query attention.
struct PlanModel {
  ModelShape shape;  // context is the sequence length
  BlockStyle style = BlockStyle::kXmod;
  MlpKind mlp = MlpKind::kSwiglu;
  int64_t kv_heads = 0;  // 0: n_heads
};

enum class Precision { kBf16, kFp16, kFp8, kFp32 };

struct Layout {
  int64_t gpus = 1;
  int64_t gpus_per_node = 8;  // 0: the cluster's
  int64_t micro_batch = 1;    // sequences per forward on one data-parallel rank
  int64_t global_batch = 1;   // sequences per optimizer step
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t ep = 1;                 // expert parallelism inside the data-parallel group
  int64_t cp = 1;                 // context parallelism: each rank holds T / cp of every sequence
  int64_t interleave = 1;         // virtual pipeline chunks per rank
  bool sequence_parallel = true;  // with tp > 1 (Megatron's sequence parallelism)
  int zero_stage = 0;
  RecomputeMode recompute = RecomputeMode::kNone;
  Precision precision = Precision::kBf16;

  int64_t micro_batches() const { return global_batch / (micro_batch * dp); }
};

// What one step costs. Every time is per optimizer step, in seconds, on the
// critical path (the slowest pipeline stage).
struct Prediction {
  double step_s = 0;
  double compute_s = 0;    // every micro-batch's kernels on the slowest stage
  double bubble_s = 0;     // pipeline fill and drain
  double tp_comm_s = 0;    // tensor-parallel collectives (exposed)
  double pp_comm_s = 0;    // stage-to-stage sends (exposed)
  double ep_comm_s = 0;    // expert all-to-alls (exposed)
  double cp_comm_s = 0;    // context-parallel K/V exchange left exposed by attention
  double dp_comm_s = 0;    // data-parallel gradient and parameter traffic left exposed
  double optimizer_s = 0;  // the optimizer step
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (no recomputation) / (time · GPUs · peak)
  double hfu = 0;  // hardware FLOPs (with recomputation)
  double model_flops_per_token = 0;
  double hardware_flops_per_token = 0;
  ParallelMemoryEstimate memory;
  double memory_gb = 0;  // memory.total in GB (1e9 bytes)
  bool fits = true;      // memory.total <= 90% of the device
};

// Why a layout cannot run a model ("tp 3 does not divide 32 heads"); OK if it can.
absl::Status CheckLayout(const PlanModel& model, const Layout& layout);

// The step of `model` under `layout` on `cluster` with efficiencies `eff`.
// The layout must pass CheckLayout.
Prediction Predict(const PlanModel& model, const Layout& layout, const ClusterProfile& cluster,
                   const Efficiency& eff);

// Model FLOPs per token, training (forward and backward, no recomputation):
// xmod's accounting for xmod's block (common/accounting.h), and for the GPT style
// 6 · (the layers' matmul weights + the head) + 12 · L · h · T (PaLM, App. B).
double ModelFlopsPerToken(const PlanModel& model);

// The forward FLOPs per token of the operation lists (matmuls and attention
// products), for the check against the accounting.
double OperationFlopsPerToken(const PlanModel& model);

// Collectives over p ranks of bandwidth `bw` (bytes/s per direction) and per-hop
// latency `lat` (docs/planner.md, "Collectives").
double AllReduceSeconds(double bytes, int64_t p, double bw, double lat);
double ReduceScatterSeconds(double bytes, int64_t p, double bw, double lat);  // = all-gather
double AllToAllSeconds(double bytes, int64_t p, double bw, double lat);
double SendSeconds(double bytes, double bw, double lat);
// (p − 1) / (v · m): the share of a step's compute the pipeline sits idle.
double BubbleFraction(int64_t p, int64_t m, int64_t v);

const char* RecomputeName(RecomputeMode mode);
const char* PrecisionName(Precision p);

// "tp 8 pp 4x2 dp 2 cp 2 ep 2 mb 1 zero 1 recompute selective" (parts that are 1
// left out), for tables and messages.
std::string LayoutText(const Layout& l);
// The layout as a JSON object (every field), for `xmod plan`'s JSON outputs.
nlohmann::json LayoutJson(const Layout& l);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_PERF_MODEL_H_
