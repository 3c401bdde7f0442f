// Expansion of a validated SweepSpec into fully resolved jobs: every number the
// worker needs (shape, capacity, batch, steps, schedule, seed) is decided here, so
// a worker builds exactly what it is told. A job's id is a hash of its canonical
// resolved config, so expanding twice gives the same ids and identical points
// (e.g. an X-MoD point at stride 1 and the dense baseline) are one job.
#ifndef XMOD_ORCHESTRATOR_SWEEP_EXPAND_H_
#define XMOD_ORCHESTRATOR_SWEEP_EXPAND_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/accounting.h"
#include "common/job_file.h"
#include "common/memory.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

// One grid point, resolved: the job file a worker trains from, and what the
// orchestrator knows besides (the axes it came from, its sizes, budget, memory
// plan and scheduling). Only `file` decides the training result and the id.
struct ResolvedJob {
  // The job file (common/job_file.h): shape, routing, batch, schedule, seed and
  // data; file.id is HexId(CanonicalConfig().dump()).
  JobFile file;
  // Axes (not part of the id: file.shape is).
  std::string scale;         // the scale's name
  double sparsity = 0.0;     // σ as written (0 for dense)
  int64_t dense_layers = 0;  // L0 of the scale
  MatchMode match = MatchMode::kFlops;
  // Sizes. file.flops_per_token is the job's training FLOPs per token (3 × forward).
  int64_t n_params_total = 0;
  int64_t n_params_active = 0;
  int64_t n_params_embedding = 0;          // embedding + head
  double dense_flops_per_token = 0.0;      // training FLOPs per token of the FLOP-matched dense job
  double inference_flops_per_token = 0.0;  // forward; deco computes only its active experts
  Sparsity sparsity_notions;               // parameter, expert and token sparsity
  // A sized baseline (moe, deco): what it was sized against ("xmod sparsity 0.5
  // stride 2" or "dense") and that job's non-embedding parameters; empty and 0
  // otherwise.
  std::string matched_to;
  int64_t matched_params = 0;
  // Budget: what the sweep asked for; file.tokens is the D it gives.
  BudgetKind budget_kind = BudgetKind::kTokensPerParam;
  double budget_value = 0.0;
  // The tokens the lr/batch compute rule is read at: the dense partner's under
  // budget.match: training_flops, else file.tokens (not part of the id).
  int64_t rule_tokens = 0;
  // flops_per_token × (steps − start_step) × batch_tokens: what this job trains
  // (a branch only its cooldown, the trunk its constant part).
  double train_flops = 0.0;
  // Memory per rank at file.micro_batch_size, with file.recompute and
  // file.optimizer_sharding as the sweep fixed them or expansion chose them
  // (docs/memory.md).
  MemoryEstimate memory;
  // Scheduling (not part of the id).
  int64_t ranks = 1;
  int64_t max_attempts = 1;
  int64_t priority = 0;

  double flops_ratio() const { return file.flops_per_token / dense_flops_per_token; }
  // "trunk", "branch" or "run" (trained alone).
  const char* role() const {
    return file.is_branch() ? "branch" : file.is_trunk() ? "trunk" : "run";
  }
  // Whether the dense law reads this job's result once it has run (a dense run or
  // branch end, never a trunk): what `order: adaptive` steers (docs/order.md).
  bool dense_law_point() const {
    return IsDenseRun(file.shape.family, file.shape.stride) && std::string_view(role()) != "trunk";
  }
  // The FLOPs this job's result would cost trained alone from step 0 (0 for a
  // trunk, whose result is not a law point): the saving of branches is the sum of
  // these against the sum of train_flops.
  double standalone_flops() const {
    return file.is_trunk() ? 0.0
                           : file.flops_per_token * static_cast<double>(file.steps) *
                                 static_cast<double>(file.batch_tokens);
  }
  // What the job really trains on: whole steps of batch_tokens (>= tokens).
  int64_t tokens_trained() const { return file.steps * file.batch_tokens; }

  // Everything that decides the training result, as JSON with sorted keys:
  // CanonicalJson(file).
  nlohmann::json CanonicalConfig() const;
  // The job file as the worker and `xmod-train --job` read it, plus the scale
  // name, sizes, budget, memory estimate and scheduling fields (which the
  // worker's reader ignores).
  nlohmann::json ToJson() const;
};

// The compute rule for `lr: auto` and `batch_tokens: auto`: DeepSeek LLM's fits
// (Bi et al. 2024, arXiv:2401.02954, §3.1): eta_opt = 0.3118 C^-0.1250 and
// B_opt = 0.2920 C^0.3271 tokens, with C the non-embedding training compute
// (FLOPs) of the FLOP-matched dense model: RuleCompute(dense shape, tokens).
// One line per sized job (moe, deco, mol): what it was sized against, its layout
// (experts, or a mol job's stages and blocks with the MoL paper's own parameter
// count), its total parameters against the target where it was sized to
// parameters (with the relative error), and its training FLOPs per token against
// the dense model's. Empty without such jobs.
std::string SizingReport(const std::vector<ResolvedJob>& jobs);

double RuleCompute(const ModelShape& dense, int64_t tokens);
// The smallest compute of the runs the rule was fitted on (DeepSeek LLM, §3.1):
// the design check warns below it.
inline constexpr double kRuleFittedFrom = 1e17;
double RuleLr(double compute);
// B_opt rounded to the nearest whole multiple of `unit` (context x ranks), at least one.
int64_t RuleBatchTokens(double compute, int64_t unit);

// The most jobs one sweep may expand to unless the caller raises it (`--max-jobs`
// on the CLI and on `xmod serve`). The bound is checked before anything is sized.
inline constexpr int64_t kDefaultMaxJobs = 1000000;

// The number of grid points of `spec` (before duplicate ids are merged), with
// products that saturate at INT64_MAX instead of wrapping.
int64_t CountGridPoints(const SweepSpec& spec);

// Resolves every grid point and baseline of `spec`. Jobs come out in grid order
// (block, scale, context, budget, seed, then sparsity and stride), each id once.
// INVALID_ARGUMENT when a point cannot be sized (e.g. no layer count matches), or
// when the grid has more than `max_jobs` points (`file:line: grid:`, with the count).
// With schedule wsd (and cooldown_branches, the default), the jobs of one
// configuration at several budgets become a trunk followed by its branches
// (MakeCooldownBranches).
absl::StatusOr<std::vector<ResolvedJob>> ExpandSweep(const SweepSpec& spec,
                                                     int64_t max_jobs = kDefaultMaxJobs);

// The cooldown-branch pass of ExpandSweep on already resolved jobs (a no-op unless
// the sweep trains wsd with cooldown_branches). INVALID_ARGUMENT, naming the
// sweep and the group, when a branch would start before the trunk's warm-up ends
// or would have no cooldown step.
absl::Status MakeCooldownBranches(const SweepSpec& spec, std::vector<ResolvedJob>* jobs);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_EXPAND_H_
