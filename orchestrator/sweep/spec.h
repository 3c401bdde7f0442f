// A sweep specification: the YAML file a researcher writes (documented field by
// field in sweeps/README.md), parsed and validated into plain structs. Parsing
// either returns a complete, valid SweepSpec or rejects the whole file with every
// problem found, each as "file:line: field: what is wrong".
#ifndef XMOD_ORCHESTRATOR_SWEEP_SPEC_H_
#define XMOD_ORCHESTRATOR_SWEEP_SPEC_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/accounting.h"
#include "common/job_file.h"

namespace xmod {

struct ScaleSpec {
  std::string name;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_layers = 0;  // L0, the dense depth the scale is defined by
  int64_t d_ff = 0;      // 0 in the file means DefaultDff(d_model); resolved on parse
  // Per-scale training overrides (`scales.NAME.train`); unset: the sweep's train.
  std::optional<double> lr;
  std::optional<int64_t> batch_tokens;
  std::optional<int64_t> micro_batch_tokens;
  std::optional<int64_t> warmup_steps;
  int line = 0;  // where the scale is defined, for messages
};

struct DataSpec {
  // Exactly one of a dataset folder (path) or the built-in synthetic source.
  std::string path;
  bool synthetic = false;
  uint64_t synthetic_seed = 0;
  int64_t vocab_size = 256;
  // The dataset's fingerprint from path/meta.json when that file can be read where
  // the spec is loaded (empty otherwise, or for a dataset from before
  // fingerprints): it goes into every job's id (docs/data.md).
  std::string fingerprint;
  // data.eos_token: the id the sweep expects to end every document, checked
  // against path/meta.json's eos_token where the spec is loaded; -1: not stated.
  int64_t eos_token = -1;
};

enum class MatchMode { kFlops, kLayers };
std::string_view MatchModeName(MatchMode mode);

// A memory setting the sweep fixes or leaves to expansion (docs/memory.md).
enum class MemoryChoice { kOff, kOn, kAuto };

struct TrainSpec {
  int64_t batch_tokens = 0;        // tokens per optimizer step, across all ranks
  bool batch_auto = false;         // batch_tokens: auto (the compute rule, docs/design-checks.md)
  bool lr_auto = false;            // lr: auto (the compute rule)
  int64_t micro_batch_tokens = 0;  // per-rank forward size; 0 = no accumulation
  // micro_batch_tokens: auto: the largest that fits resources.gpu_memory_gb.
  bool micro_auto = false;
  // recompute: false | true | auto (on only for a job that does not fit without it).
  MemoryChoice recompute = MemoryChoice::kOff;
  // optimizer_sharding: none | zero1 | auto (zero1 whenever a job has two ranks or more).
  MemoryChoice optimizer_sharding = MemoryChoice::kOff;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = -1;  // -1: use warmup_fraction
  double warmup_fraction = 0.05;
  // train.lr_scan (docs/design-checks.md, "An lr axis at the smallest scales"): at
  // the `lr_scan_scales` smallest scales every job also runs at lr × each factor
  // (factor 1 is the job itself); empty: no scan.
  std::vector<double> lr_scan_factors;
  int64_t lr_scan_scales = 0;
  int lr_scan_line = 0;
  int64_t min_warmup_steps = 10;  // floor on the warm-up, at most a quarter of the steps
  Schedule schedule = Schedule::kCosine;
  double decay_fraction = 0.2;  // wsd: final fraction of steps spent decaying
  DecayShape decay_shape = DecayShape::kOneMinusSqrt;  // wsd: the cooldown's shape
  // wsd with several budgets of one configuration: one constant-LR trunk and a
  // cooldown branch per budget (docs/schedules.md); false trains each budget alone.
  bool cooldown_branches = true;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  int64_t eval_interval = 0;        // steps; 0 = ten evaluations per run
  int64_t eval_tokens = 65536;      // validation tokens per interim evaluation
  int64_t final_eval_tokens = -1;   // at the last step: -1 as eval_tokens, 0 the whole split
  int64_t checkpoint_interval = 0;  // steps; 0 = only at the end
  int64_t log_interval = 1;
  uint64_t seed = 1234;
  std::string precision = "fp32";  // fp32 | bf16 (bf16 on GPUs only)
  double balance_coef = 0.01;      // λ_bal, X-MoD only
  double router_coef = 0.01;       // λ_c, routed families
};

struct ResourceSpec {
  int64_t ranks = 1;
  // Memory of one rank's device in GB (10^9 bytes); 0: not declared (nothing is
  // checked or chosen against it).
  double gpu_memory_gb = 0.0;
  int gpu_memory_line = 0;
  int64_t max_attempts = 3;
  int64_t priority = 0;
  // Lease order within a priority: cheapest-first (false), or law-driven
  // (`order: adaptive`, docs/order.md): the dense law is refitted after each
  // completed job and its jobs are leased by expected gain at `order_target`.
  bool adaptive_order = false;
  int order_line = 0;
  // Where the law's prediction should be sure: N (non-embedding parameters) and D
  // (tokens). 0: four times the sweep's largest dense N, at 20 tokens per parameter.
  double order_target_params = 0.0;
  double order_target_tokens = 0.0;
};

// One block of the grid: a product of axes with its own family, budget and
// baselines (inherited from the top level when the block does not give them). A
// `grid:` mapping is one block; a `grid:` list is one block per entry.
struct GridBlock {
  Family family = Family::kXmod;
  std::vector<std::string> scales;
  std::vector<double> sparsity;
  std::vector<int64_t> stride;
  std::vector<int64_t> context;
  std::vector<uint64_t> seeds;  // the replicate axis; empty: train.seed
  // moe only: experts per token and granularity; empty: moe.top_k, moe.granularity.
  std::vector<int64_t> top_k;
  std::vector<int64_t> granularity;
  std::vector<Family> baselines;
  BudgetKind budget_kind = BudgetKind::kTokensPerParam;
  std::vector<double> budget_values;
  // budget.match: training_flops: a routed or expert job trains the tokens that
  // give its dense partner's training FLOPs (docs/design-checks.md).
  bool match_training_flops = false;
  int line = 0;         // of the block, for messages
  int budget_line = 0;  // of the budget the block uses
  // The field names messages use: "grid" or "grid[1]"; "budget" or "grid[1].budget".
  std::string field = "grid";
  std::string budget_field = "budget";
};

// What the design check (design_check.h) holds the sweep to.
struct DesignSpec {
  std::vector<std::string> laws;  // laws the sweep will be fitted with
  bool laws_given = false;        // false: dense (and xmod when the sweep has X-MoD jobs)
  double flop_tolerance = 0.05;   // |FLOPs per token / dense FLOPs per token − 1|
  // Parameters frozen when the sweep's laws are fitted (`xmod run`, `xmod fit
  // SWEEP` without --fix, `xmod advise`): law -> reported name -> value, for a
  // design that cannot identify them (docs/design-checks.md).
  std::map<std::string, std::map<std::string, double>> fix;
  int line = 0;
};

struct SweepSpec {
  std::string name;
  std::string description;
  std::string source;     // the file name errors refer to
  std::string yaml_text;  // the text as submitted, kept with the sweep
  DataSpec data;
  Family family = Family::kXmod;
  MatchMode match = MatchMode::kFlops;
  std::vector<ScaleSpec> scales;  // in file order
  // The grid. For dense and mod families sparsity and stride are fixed (0/1 and 0.875/2).
  std::vector<std::string> grid_scales;
  std::vector<double> grid_sparsity;
  std::vector<int64_t> grid_stride;
  std::vector<int64_t> grid_context;
  std::vector<uint64_t> grid_seeds;       // empty: train.seed
  std::vector<int64_t> grid_top_k;        // moe; empty: moe.top_k
  std::vector<int64_t> grid_granularity;  // moe; empty: moe.granularity
  int grid_line = 1;
  int budget_line = 1;
  std::vector<Family> baselines;
  BudgetKind budget_kind = BudgetKind::kTokensPerParam;
  std::vector<double> budget_values;
  bool match_training_flops = false;  // the top-level budget's `match: training_flops`
  TrainSpec train;
  // Each family's own section of the file (`moe:`, `deco:`; SweepFamily::section),
  // as the options object its parser read: section name → the values given.
  // A family reads its options through SectionOptions (sweep_family.h), which
  // puts them over its defaults, so a spec built in code may leave this empty.
  std::map<std::string, nlohmann::json> family_options;
  ResourceSpec resources;
  DesignSpec design;
  // The grid as blocks when `grid:` is a list. Empty for a `grid:` mapping (or a
  // spec built in code): Blocks() then makes one block from the fields above.
  std::vector<GridBlock> blocks;
  // Where each value was written: "scales.s.n_layers", "grid.sparsity[1]" or
  // "budget.tokens" (an axis given as one value) → its 1-based line, so that
  // expansion's refusals point at it. Empty for a spec built in code.
  std::map<std::string, int> field_lines;

  // The line of `field`, or `fallback` when it was not written.
  int LineOf(const std::string& field, int fallback) const;
  // The name and line of value `index` of the axis `field` ("grid.sparsity[1]"
  // or, given as one value, "grid.sparsity"); `field` and `fallback` when unknown.
  std::pair<std::string, int> AxisValueAt(const std::string& field, size_t index,
                                          int fallback) const;
  // "file:LINE: field: " for a message.
  std::string Where(const std::string& field, int line) const;

  const ScaleSpec* FindScale(const std::string& name) const;
  std::vector<GridBlock> Blocks() const;
};

// Parses and validates `text`; `source` names the file in messages. On failure the
// status is INVALID_ARGUMENT and its message holds one line per problem.
// Where `order: adaptive` wants the dense law sure (docs/order.md): the declared
// order_target, else 4 × `largest_dense_params` at 20 tokens per parameter.
// Returns {params, tokens}.
std::pair<double, double> OrderTarget(const ResourceSpec& resources, double largest_dense_params);

absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& text, const std::string& source);

// Reads `path` and parses it. NOT_FOUND when the file cannot be read.
absl::StatusOr<SweepSpec> LoadSweepSpec(const std::string& path);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_SPEC_H_
