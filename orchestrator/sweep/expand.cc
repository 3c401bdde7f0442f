#include "orchestrator/sweep/expand.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "orchestrator/sweep/family/sweep_family.h"

namespace xmod {

nlohmann::json ResolvedJob::CanonicalConfig() const { return CanonicalJson(file); }

nlohmann::json ResolvedJob::ToJson() const {
  nlohmann::json j = xmod::ToJson(file);
  j["scale"] = scale;
  j["sparsity"] = sparsity;
  j["dense_layers"] = dense_layers;
  j["match"] = MatchModeName(match);
  j["n_params_total"] = n_params_total;
  j["n_params_active"] = n_params_active;
  j["n_params_embedding"] = n_params_embedding;
  j["dense_flops_per_token"] = dense_flops_per_token;
  j["inference_flops_per_token"] = inference_flops_per_token;
  j["param_sparsity"] = sparsity_notions.parameter;
  j["expert_sparsity"] = sparsity_notions.expert;
  j["token_sparsity"] = sparsity_notions.token;
  if (!matched_to.empty()) {
    j["matched_to"] = matched_to;
    j["matched_params"] = matched_params;
    j["matched_params_error"] =
        double(n_params_total) / double(std::max<int64_t>(1, matched_params)) - 1.0;
  }
  j["flops_ratio"] = flops_ratio();
  j["budget_kind"] = BudgetKindName(budget_kind);
  j["budget_value"] = budget_value;
  j["train_flops"] = train_flops;
  j["standalone_flops"] = standalone_flops();
  j["role"] = role();
  j["tokens_trained"] = tokens_trained();
  j["memory_per_rank_bytes"] = memory.peak;
  j["memory_peak_phase"] = memory.peak_phase;
  j["memory_weights_bytes"] = memory.weights;
  j["memory_gradients_bytes"] = memory.gradients;
  j["memory_optimizer_bytes"] = memory.optimizer;
  j["memory_activations_bytes"] = memory.activations;
  j["ranks"] = ranks;
  j["max_attempts"] = max_attempts;
  j["priority"] = priority;
  return j;
}

namespace {

// Steps between interim evaluations: as the sweep says, or ten per run.
int64_t EvalInterval(const TrainSpec& t, int64_t steps) {
  return t.eval_interval > 0 ? std::min(t.eval_interval, steps)
                             : std::max<int64_t>(1, (steps + 9) / 10);
}

// Steps between checkpoints: as the sweep says, or only at the end.
int64_t CheckpointInterval(const TrainSpec& t, int64_t steps) {
  return t.checkpoint_interval > 0 ? std::min(t.checkpoint_interval, steps) : steps;
}

}  // namespace

namespace {

// The divisors of n >= 1, largest first, in O(sqrt(n)) steps: the rows per rank
// reach 2^40 at most, so a walk over every m <= n could take hours.
std::vector<int64_t> DivisorsDescending(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t m = 1; m <= n / m; ++m) {
    if (n % m != 0) continue;
    small.push_back(m);
    if (m != n / m) large.push_back(n / m);
  }
  large.insert(large.end(), small.rbegin(), small.rend());
  return large;
}

// The memory settings of one configuration, as the model prices them (GPU: fused
// attention, CUDA autocast).
MemoryConfig MemoryConfigFor(const ResolvedJob& job, int64_t micro, bool recompute, bool zero1) {
  MemoryConfig c;
  c.micro_batch_rows = micro;
  c.micro_batches = job.file.batch_size / job.ranks / micro;
  c.eval_rows = EvalRows(micro, job.file.shape.context, job.file.shape.vocab_size);
  c.bf16 = job.file.precision == "bf16";
  c.recompute = recompute;
  c.fused_attention = true;
  c.cuda = true;
  c.optimizer_shards = zero1 ? job.ranks : 1;
  return c;
}

// Chooses (or checks) the micro-batch, recomputation and optimizer sharding of
// `job` against the sweep's declared device memory: sharding is free (ZeRO-1
// moves the bytes of an all-reduce), so auto takes it whenever there are two
// ranks; recomputation costs a forward, so auto takes it only when nothing fits
// without it; an automatic micro-batch is the largest divisor of the rows per
// rank that fits. Without a declared memory nothing is refused and the estimate
// is only reported. `fixed_micro` is the micro-batch the sweep fixed (0: auto).
absl::Status PlanMemory(const SweepSpec& spec, const std::string& where, int64_t fixed_micro,
                        ResolvedJob* job) {
  const TrainSpec& t = spec.train;
  const int64_t per_rank = job->file.batch_size / job->ranks;
  const bool zero1 = t.optimizer_sharding == MemoryChoice::kOn ||
                     (t.optimizer_sharding == MemoryChoice::kAuto && job->ranks > 1);
  std::vector<bool> recompute_options;
  if (t.recompute != MemoryChoice::kOn) recompute_options.push_back(false);
  // The expert families, mol and gdn have no recomputation yet (the spec refuses `true`).
  if (t.recompute != MemoryChoice::kOff && Traits(job->file.shape.family).recomputes) {
    recompute_options.push_back(true);
  }
  std::vector<int64_t> micro_options;
  if (fixed_micro > 0) {
    micro_options.push_back(fixed_micro);
  } else {
    micro_options = DivisorsDescending(per_rank);
  }
  const double declared = spec.resources.gpu_memory_gb * 1e9;
  const double usable = UsableDeviceBytes(declared);
  job->file.optimizer_sharding = zero1 ? "zero1" : "none";
  for (bool recompute : recompute_options) {
    for (int64_t micro : micro_options) {
      const MemoryEstimate e =
          EstimateTrainingMemory(job->file.shape, MemoryConfigFor(*job, micro, recompute, zero1));
      if (declared <= 0 || e.peak <= usable) {
        job->file.micro_batch_size = micro;
        job->file.recompute = recompute;
        job->memory = e;
        return absl::OkStatus();
      }
    }
  }
  // Nothing fits: report the smallest configuration tried.
  const bool recompute = recompute_options.back();
  const int64_t micro = micro_options.back();
  const MemoryEstimate e =
      EstimateTrainingMemory(job->file.shape, MemoryConfigFor(*job, micro, recompute, zero1));
  return absl::InvalidArgumentError(absl::StrCat(
      spec.source, ":", spec.resources.gpu_memory_line, ": resources.gpu_memory_gb: ", where,
      " needs ", FormatBytes(e.peak), " per rank (", e.peak_phase, " peak) at micro-batch ", micro,
      " sequence(s), recompute ", recompute ? "on" : "off", ", optimizer sharding ",
      zero1 ? "zero1" : "none", ": weights ", FormatBytes(e.weights), ", gradients ",
      FormatBytes(e.gradients), ", optimizer ", FormatBytes(e.optimizer), ", activations ",
      FormatBytes(e.activations), "; ", spec.resources.gpu_memory_gb, " GB leaves ",
      FormatBytes(usable),
      " for tensors (docs/memory.md). Use more ranks with "
      "optimizer_sharding: zero1, recompute: auto, a smaller micro_batch_tokens, or a larger "
      "device"));
}

// The routing settings of the job's family (its gate, balancing and router
// coefficients, expert training), and the sparsity a moe or deco job reports.
void SetRouting(const SweepSpec& spec, ResolvedJob* job) {
  SweepFamilyOf(job->file.shape.family).routing(spec, job);
  const ModelShape& s = job->file.shape;
  job->file.routed_tokens =
      NumRoutedLayers(s) == 0 ? s.context : RoutedTokens(s.capacity, s.context);
}

// The parameter counts, FLOPs per token and sparsities of the job's shape.
void SetSizes(const ScaleSpec& scale, ResolvedJob* job) {
  const ModelShape& s = job->file.shape;
  const ParamCount params = CountParams(s);
  job->n_params_total = params.non_embedding;
  job->n_params_embedding = params.embedding + params.head;
  job->n_params_active = ActiveParams(s, scale.n_layers);
  job->file.flops_per_token = TrainFlopsPerToken(s);
  job->dense_flops_per_token = 3.0 * ForwardFlopsPerToken(DenseReference(s, scale.n_layers));
  job->inference_flops_per_token = InferenceFlopsPerToken(s);
  job->sparsity_notions = SparsityOf(s, scale.n_layers);
}

// The tokens the block's budget gives (the budget_index-th value), then the batch
// and the steps: the batch as the scale or the sweep fixes it, or the compute rule
// at the FLOP-matched dense model's compute, so that a sparse job trains with the
// batch of the dense job it is compared with.
absl::Status SetBudget(const SweepSpec& spec, const GridBlock& block, const ScaleSpec& scale,
                       size_t budget_index, ResolvedJob* job) {
  const TrainSpec& t = spec.train;
  JobFile& f = job->file;
  const int64_t context = f.shape.context;
  job->budget_kind = block.budget_kind;
  job->budget_value = block.budget_values[budget_index];
  auto tokens =
      BudgetTokens(block.budget_kind, job->budget_value, job->n_params_active, f.flops_per_token);
  if (!tokens.ok()) {
    const auto [field, line] = spec.AxisValueAt(
        absl::StrCat(block.budget_field, ".", std::string(BudgetKindName(block.budget_kind))),
        budget_index, block.budget_line);
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(field, line), std::string(BudgetKindName(block.budget_kind)), " ",
        job->budget_value, " for scale ", scale.name, ", ", std::string(FamilyName(f.shape.family)),
        " at context ", context, " (", job->n_params_active, " active parameters, ",
        f.flops_per_token, " training FLOPs per token) ", tokens.status().message()));
  }
  f.tokens = *tokens;
  job->rule_tokens = f.tokens;
  if (block.match_training_flops && !IsDenseRun(f.shape.family, f.shape.stride)) {
    // The dense partner's budget (the same scale and context), then the tokens
    // that give this job the same training FLOPs at its own FLOPs per token.
    const ModelShape dense = DenseReference(f.shape, scale.n_layers);
    ASSIGN_OR_RETURN(const int64_t dense_tokens,
                     BudgetTokens(block.budget_kind, job->budget_value,
                                  ActiveParams(dense, scale.n_layers), TrainFlopsPerToken(dense)));
    f.tokens = std::max<int64_t>(1, std::llround(static_cast<double>(dense_tokens) *
                                                 TrainFlopsPerToken(dense) / f.flops_per_token));
    job->rule_tokens = dense_tokens;
  }
  if (scale.batch_tokens.has_value()) {
    f.batch_tokens = *scale.batch_tokens;
  } else if (t.batch_auto) {
    const double compute = RuleCompute(DenseReference(f.shape, scale.n_layers), job->rule_tokens);
    f.batch_tokens = RuleBatchTokens(compute, context * spec.resources.ranks);
    if (f.batch_tokens > kMaxBatchTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.Where("train.batch_tokens", spec.LineOf("train.batch_tokens", 1)), "auto gives ",
          f.batch_tokens, " tokens for scale ", scale.name, " at ", f.tokens,
          " tokens, more than 2^40 = ", kMaxBatchTokens, " (give batch_tokens as a number)"));
    }
  } else {
    f.batch_tokens = t.batch_tokens;
  }
  f.batch_size = f.batch_tokens / context;
  f.steps = StepsFor(f.tokens, f.batch_tokens);
  job->train_flops =
      f.flops_per_token * static_cast<double>(f.steps) * static_cast<double>(f.batch_tokens);
  return absl::OkStatus();
}

// The micro-batch the sweep fixes for the job (through micro_batch_tokens, of the
// scale or the sweep), or 0 when expansion chooses it from the device memory.
// Micro-batches tile the rows per rank exactly: the largest divisor that fits.
int64_t FixedMicroBatch(const SweepSpec& spec, const ScaleSpec& scale, const ResolvedJob& job) {
  const TrainSpec& t = spec.train;
  if (t.micro_auto && !scale.micro_batch_tokens.has_value()) return 0;
  const int64_t context = job.file.shape.context;
  const int64_t micro_tokens = scale.micro_batch_tokens.value_or(t.micro_batch_tokens);
  const int64_t per_rank = job.file.batch_size / spec.resources.ranks;
  const int64_t most = micro_tokens > 0 ? std::min(per_rank, micro_tokens / context) : per_rank;
  for (int64_t m : DivisorsDescending(std::max<int64_t>(1, per_rank))) {
    if (m <= most) return m;
  }
  return 1;
}

// The optimizer, schedule, evaluation and checkpoint settings, once the steps are
// known: the learning rate as the scale or the sweep gives it, or the compute rule
// at the FLOP-matched dense model's compute (as the batch).
void SetSchedule(const SweepSpec& spec, const ScaleSpec& scale, ResolvedJob* job) {
  const TrainSpec& t = spec.train;
  JobFile& f = job->file;
  const int64_t context = f.shape.context;
  const double compute = RuleCompute(DenseReference(f.shape, scale.n_layers),
                                     job->rule_tokens > 0 ? job->rule_tokens : f.tokens);
  f.lr = scale.lr.has_value() ? *scale.lr : (t.lr_auto ? RuleLr(compute) : t.lr);
  f.min_lr = f.lr * t.min_lr_ratio;
  const int64_t warmup_given = scale.warmup_steps.value_or(t.warmup_steps);
  if (warmup_given >= 0) {
    f.warmup_steps = std::min(warmup_given, f.steps);  // as written
  } else {
    // A fraction of the steps, floored at min_warmup_steps; the floor never takes
    // more than a quarter of a short job.
    f.warmup_steps =
        std::max<int64_t>(std::llround(t.warmup_fraction * static_cast<double>(f.steps)),
                          std::min(t.min_warmup_steps, f.steps / 4));
  }
  f.schedule = t.schedule;
  f.decay_steps = t.schedule == Schedule::kWsd
                      ? std::llround(t.decay_fraction * static_cast<double>(f.steps))
                      : 0;
  if (t.schedule == Schedule::kWsd) f.decay_shape = t.decay_shape;
  f.weight_decay = t.weight_decay;
  f.grad_clip = t.grad_clip;
  f.beta1 = t.beta1;
  f.beta2 = t.beta2;
  f.eval_interval = EvalInterval(t, f.steps);
  // Validation windows are whole sequences of this context.
  f.eval_tokens = std::max<int64_t>(1, t.eval_tokens / context) * context;
  // Absent unless the sweep asks for a separate final evaluation, so that the
  // ids of jobs that do not are what they were before the field existed.
  if (t.final_eval_tokens > 0) {
    f.final_eval_tokens = std::max<int64_t>(1, t.final_eval_tokens / context) * context;
  } else if (t.final_eval_tokens == 0) {
    f.final_eval_tokens = 0;
  }
  f.checkpoint_interval = CheckpointInterval(t, f.steps);
  f.log_interval = t.log_interval;
}

// The data source as the job file names it: a dataset folder, or the synthetic
// source's seed.
void SetData(const DataSpec& data, JobFile* f) {
  if (!data.synthetic) {
    f->data_path = data.path;
    f->data_fingerprint = data.fingerprint;
  }
  f->synthetic_seed = data.synthetic ? data.synthetic_seed : 0;
  f->data_vocab_size = data.vocab_size;
}

// One grid point of `block` at one scale, context, budget and seed, as a job:
// its shape (sized to match the dense model), routing, sizes, budget, memory
// plan and schedule, then its id.
absl::StatusOr<ResolvedJob> Resolve(const SweepSpec& spec, const GridBlock& block,
                                    const ScaleSpec& scale, int64_t context, size_t budget_index,
                                    uint64_t seed, GridPoint point) {
  ResolvedJob job;
  JobFile& f = job.file;
  job.scale = scale.name;
  job.dense_layers = scale.n_layers;
  job.match = spec.match;
  // Stride 1 has no routed layer: whatever the family, it is the dense model.
  if (IsDenseRun(point.family, point.stride)) point = GridPoint{Family::kDense, 0.0, 1};
  job.sparsity = point.sparsity;
  RETURN_IF_ERROR(SweepFamilyOf(point.family).shape(spec, block, scale, context, point, &job));
  SetRouting(spec, &job);
  SetSizes(scale, &job);
  RETURN_IF_ERROR(SetBudget(spec, block, scale, budget_index, &job));

  job.ranks = spec.resources.ranks;
  f.precision = spec.train.precision;
  RETURN_IF_ERROR(PlanMemory(
      spec,
      absl::StrCat("scale ", scale.name, ", ", std::string(FamilyName(f.shape.family)),
                   ", context ", context, ", sparsity ", point.sparsity, ", stride ", point.stride),
      FixedMicroBatch(spec, scale, job), &job));

  SetSchedule(spec, scale, &job);
  f.seed = seed;
  SetData(spec.data, &f);
  job.max_attempts = spec.resources.max_attempts;
  job.priority = spec.resources.priority;
  f.id = HexId(job.CanonicalConfig().dump());
  return job;
}

}  // namespace

std::string SizingReport(const std::vector<ResolvedJob>& jobs) {
  std::string out;
  for (const ResolvedJob& j : jobs) {
    if (j.matched_to.empty()) continue;
    const ModelShape& shape = j.file.shape;
    const auto note = SweepFamilyOf(shape.family).sizing_note;
    char numbers[160];
    if (j.matched_params > 0) {  // sized to parameters (moe, deco)
      const double error = 100.0 * (double(j.n_params_total) / double(j.matched_params) - 1.0);
      std::snprintf(numbers, sizeof(numbers),
                    "%lld parameters vs %lld (%+.1f%%); training FLOPs per token %.3f x dense",
                    static_cast<long long>(j.n_params_total),
                    static_cast<long long>(j.matched_params), error, j.flops_ratio());
    } else {  // sized to FLOPs (mol): its depth is the match
      std::snprintf(numbers, sizeof(numbers),
                    "%lld parameters (%lld active); training FLOPs per token %.3f x dense",
                    static_cast<long long>(j.n_params_total),
                    static_cast<long long>(j.n_params_active), j.flops_ratio());
    }
    absl::StrAppend(&out, "sizing: ", std::string(FamilyName(shape.family)), " at scale ", j.scale,
                    ", T = ", shape.context, ", against ", j.matched_to, ": ",
                    note != nullptr ? note(shape) : std::string(), ": ", numbers, "\n");
  }
  return out;
}

double RuleCompute(const ModelShape& dense, int64_t tokens) {
  // Non-embedding training FLOPs per token (3 x forward without the head).
  const double head =
      2.0 * static_cast<double>(dense.d_model) * static_cast<double>(dense.vocab_size);
  const double per_token = 3.0 * (ForwardFlopsPerToken(dense) - head);
  return per_token * static_cast<double>(tokens);
}

double RuleLr(double compute) { return 0.3118 * std::pow(compute, -0.1250); }

int64_t RuleBatchTokens(double compute, int64_t unit) {
  const double b = 0.2920 * std::pow(compute, 0.3271);
  const int64_t units = std::max<int64_t>(1, std::llround(b / static_cast<double>(unit)));
  return units * unit;
}

int64_t CountGridPoints(const SweepSpec& spec) {
  int64_t total = 0;
  for (const GridBlock& block : spec.Blocks()) {
    const int64_t family_points = SweepFamilyOf(block.family).count(spec, block);
    int64_t baseline_points = 0;
    for (Family baseline : block.baselines) {
      const SweepFamily& b = SweepFamilyOf(baseline);
      baseline_points +=
          b.baseline_count != nullptr ? b.baseline_count(spec, block, family_points) : 1;
    }
    const int64_t points = family_points > std::numeric_limits<int64_t>::max() - baseline_points
                               ? std::numeric_limits<int64_t>::max()
                               : family_points + baseline_points;
    const int64_t n =
        SaturatingProduct({points, static_cast<int64_t>(block.scales.size()),
                           static_cast<int64_t>(block.context.size()),
                           static_cast<int64_t>(block.budget_values.size()),
                           block.seeds.empty() ? 1 : static_cast<int64_t>(block.seeds.size())});
    total = n > std::numeric_limits<int64_t>::max() - total ? std::numeric_limits<int64_t>::max()
                                                            : total + n;
  }
  return total;
}

namespace {

// The points of one block: its family's, then its baselines' (a moe baseline per
// X-MoD point of the block; the others once).
std::vector<GridPoint> BlockPoints(const SweepSpec& spec, const GridBlock& block) {
  std::vector<GridPoint> points = SweepFamilyOf(block.family).points(spec, block);
  const std::vector<GridPoint> own = points;
  for (Family baseline : block.baselines) {
    const SweepFamily& b = SweepFamilyOf(baseline);
    const std::vector<GridPoint> more =
        b.baseline_points != nullptr ? b.baseline_points(spec, block, own) : OnePoint(baseline);
    points.insert(points.end(), more.begin(), more.end());
  }
  return points;
}

}  // namespace

namespace {

// What identifies a configuration apart from its budget: the canonical config
// without the fields a budget decides, and the scale's name.
std::string BudgetFreeKey(const ResolvedJob& job) {
  nlohmann::json j = job.CanonicalConfig();
  for (const char* field : {"tokens", "steps", "batch_tokens", "batch_size", "micro_batch_size",
                            "lr", "min_lr", "warmup_steps", "decay_steps", "eval_interval",
                            "checkpoint_interval", "recompute", "optimizer_sharding"}) {
    j.erase(field);
  }
  return job.scale + "|" + j.dump();
}

// The first of `fields` the sweep wrote, else `fallback`.
std::string FirstWritten(const SweepSpec& spec, const std::vector<std::string>& fields,
                         const std::string& fallback) {
  for (const std::string& f : fields) {
    if (spec.field_lines.count(f) > 0) return f;
  }
  return fallback;
}

// Turns `b`, one member of a cooldown group, into its branch: it trains with the
// settings of `reference` (the group's smallest budget) and decays over the last
// decay_fraction of its own steps. INVALID_ARGUMENT when no cooldown step is left
// or when the trunk's warm-up runs past the branch's start. Its parent and id are
// set once the trunk's id is known.
absl::Status MakeBranch(const SweepSpec& spec, const ResolvedJob& reference, ResolvedJob* b) {
  const TrainSpec& t = spec.train;
  const JobFile& r = reference.file;
  JobFile& f = b->file;
  f.lr = r.lr;
  f.min_lr = r.min_lr;
  f.batch_tokens = r.batch_tokens;
  f.batch_size = r.batch_size;
  f.micro_batch_size = r.micro_batch_size;
  f.recompute = r.recompute;
  f.optimizer_sharding = r.optimizer_sharding;
  b->memory = reference.memory;
  f.warmup_steps = r.warmup_steps;
  f.steps = StepsFor(f.tokens, f.batch_tokens);
  f.decay_steps = std::llround(t.decay_fraction * static_cast<double>(f.steps));
  f.start_step = f.steps - f.decay_steps;
  const std::string what = absl::StrCat("cooldown branches of scale ", b->scale, ", ",
                                        std::string(FamilyName(f.shape.family)), ", context ",
                                        f.shape.context, ", ", f.tokens, " tokens: ");
  if (f.decay_steps < 1 || f.start_step < 1) {
    const std::string field =
        FirstWritten(spec, {"train.decay_fraction", "train.schedule"}, "train");
    return absl::InvalidArgumentError(
        absl::StrCat(spec.Where(field, spec.LineOf(field, 1)), what, "a cooldown of ",
                     f.decay_steps, " of ", f.steps,
                     " steps leaves no branch (raise the budget, change decay_fraction, or set "
                     "cooldown_branches: false)"));
  }
  if (f.warmup_steps > f.start_step) {
    const std::string field = FirstWritten(
        spec,
        {absl::StrCat("scales.", reference.scale, ".train.warmup_steps"), "train.warmup_steps",
         "train.warmup_fraction", "train.min_warmup_steps", "train.schedule"},
        "train");
    return absl::InvalidArgumentError(absl::StrCat(
        spec.Where(field, spec.LineOf(field, 1)), what, "the trunk's warm-up (", f.warmup_steps,
        " steps, from the smallest budget) runs past this branch's start at step ", f.start_step,
        " (shorten the warm-up, or set cooldown_branches: false)"));
  }
  f.eval_interval = EvalInterval(t, f.steps);
  f.checkpoint_interval = CheckpointInterval(t, f.steps);
  b->train_flops = f.flops_per_token * static_cast<double>(f.steps - f.start_step) *
                   static_cast<double>(f.batch_tokens);
  return absl::OkStatus();
}

// The trunk of a cooldown group: `reference`'s settings at a constant learning
// rate up to the last branch start, keeping a checkpoint at every start (sorted,
// each once). It carries the largest member's budget.
ResolvedJob MakeTrunk(const SweepSpec& spec, const ResolvedJob& reference,
                      const ResolvedJob& largest, std::vector<int64_t> starts) {
  const TrainSpec& t = spec.train;
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  ResolvedJob trunk = reference;
  JobFile& f = trunk.file;
  trunk.budget_kind = largest.budget_kind;
  trunk.budget_value = largest.budget_value;
  f.schedule = Schedule::kConstant;
  f.decay_steps = 0;
  f.decay_shape = DecayShape::kLinear;
  f.steps = starts.back();
  f.tokens = f.steps * f.batch_tokens;
  f.keep_steps = starts;
  f.eval_interval = EvalInterval(t, f.steps);
  f.checkpoint_interval = CheckpointInterval(t, f.steps);
  trunk.train_flops =
      f.flops_per_token * static_cast<double>(f.steps) * static_cast<double>(f.batch_tokens);
  // Its branches wait for its checkpoints: it goes first among equals.
  trunk.priority = reference.priority + 1;
  f.id = HexId(trunk.CanonicalConfig().dump());
  return trunk;
}

}  // namespace

// Cooldown branches (docs/schedules.md; Hägele et al. 2024): the wsd jobs of one
// configuration that differ only in their budget become one constant-LR trunk
// and one branch per budget. The group trains with one learning rate, batch and
// warm-up (the trunk's), so that every branch continues exactly the run it would
// have been alone with those settings: the smallest budget's. A smaller batch is
// at least as token-efficient at the larger budgets, while the larger budgets'
// batch costs the small ones optimizer steps (docs/schedules.md has both measured). The branch of
// budget D starts at the trunk's step round((1 − f)·steps(D)) and decays over the rest.
absl::Status MakeCooldownBranches(const SweepSpec& spec, std::vector<ResolvedJob>* jobs) {
  const TrainSpec& t = spec.train;
  if (t.schedule != Schedule::kWsd || !t.cooldown_branches) return absl::OkStatus();
  std::unordered_map<std::string, std::vector<size_t>> groups;
  std::vector<std::string> order;  // first appearance, so the output is deterministic
  for (size_t i = 0; i < jobs->size(); ++i) {
    const std::string key = BudgetFreeKey((*jobs)[i]);
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(i);
  }
  std::vector<ResolvedJob> out;
  out.reserve(jobs->size() + order.size());
  for (const std::string& key : order) {
    std::vector<size_t>& members = groups[key];
    if (members.size() < 2) {
      out.push_back(std::move((*jobs)[members[0]]));
      continue;
    }
    std::sort(members.begin(), members.end(),
              [&](size_t a, size_t b) { return (*jobs)[a].file.tokens < (*jobs)[b].file.tokens; });
    // The settings every member trains with: the smallest budget's (see above).
    const ResolvedJob reference = (*jobs)[members.front()];
    const ResolvedJob largest = (*jobs)[members.back()];
    std::vector<ResolvedJob> branches;
    std::vector<int64_t> starts;
    for (size_t i : members) {
      ResolvedJob b = std::move((*jobs)[i]);
      RETURN_IF_ERROR(MakeBranch(spec, reference, &b));
      starts.push_back(b.file.start_step);
      branches.push_back(std::move(b));
    }
    const ResolvedJob trunk = MakeTrunk(spec, reference, largest, std::move(starts));
    out.push_back(trunk);
    for (ResolvedJob& b : branches) {
      b.file.parent = trunk.file.id;
      b.file.id = HexId(b.CanonicalConfig().dump());
      out.push_back(std::move(b));
    }
  }
  *jobs = std::move(out);
  return absl::OkStatus();
}

namespace {

// train.lr_scan: every job of the `lr_scan_scales` smallest scales (by the dense
// model's non-embedding parameters, 12 · L0 · d²) again at lr × each factor other
// than 1, its lr_factor recorded (docs/design-checks.md).
absl::Status AddLrScan(const SweepSpec& spec, std::vector<ResolvedJob>* jobs) {
  const TrainSpec& t = spec.train;
  if (t.lr_scan_factors.empty()) return absl::OkStatus();
  std::vector<std::pair<double, std::string>> sizes;
  for (const ScaleSpec& s : spec.scales) {
    sizes.emplace_back(12.0 * static_cast<double>(s.n_layers) * static_cast<double>(s.d_model) *
                           static_cast<double>(s.d_model),
                       s.name);
  }
  std::sort(sizes.begin(), sizes.end());
  if (t.lr_scan_scales > static_cast<int64_t>(sizes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.source, ":", t.lr_scan_line, ": train.lr_scan.scales: ", t.lr_scan_scales,
                     " smallest scales asked for, but the sweep defines ", sizes.size()));
  }
  std::set<std::string> scanned;
  for (int64_t i = 0; i < t.lr_scan_scales; ++i) scanned.insert(sizes[i].second);
  std::unordered_set<std::string> seen;
  for (const ResolvedJob& j : *jobs) seen.insert(j.file.id);
  std::vector<ResolvedJob> extra;
  for (const ResolvedJob& j : *jobs) {
    if (scanned.count(j.scale) == 0) continue;
    for (double factor : t.lr_scan_factors) {
      if (factor == 1.0) continue;
      ResolvedJob c = j;
      c.file.lr = j.file.lr * factor;
      c.file.min_lr = j.file.min_lr * factor;
      c.file.lr_factor = factor;
      c.file.id = HexId(c.CanonicalConfig().dump());
      if (seen.insert(c.file.id).second) extra.push_back(std::move(c));
    }
  }
  jobs->insert(jobs->end(), std::make_move_iterator(extra.begin()),
               std::make_move_iterator(extra.end()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ResolvedJob>> ExpandSweep(const SweepSpec& spec, int64_t max_jobs) {
  const int64_t count = CountGridPoints(spec);
  if (count > max_jobs) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.source, ":", spec.grid_line, ": grid: the grid makes ",
                     count == std::numeric_limits<int64_t>::max() ? std::string("more than 9.2e18")
                                                                  : absl::StrCat(count),
                     " jobs, more than the limit of ", max_jobs,
                     " (split the sweep, or raise the limit with --max-jobs)"));
  }
  std::vector<ResolvedJob> jobs;
  std::unordered_set<std::string> seen;
  for (const GridBlock& block : spec.Blocks()) {
    std::vector<GridPoint> points = BlockPoints(spec, block);
    const std::vector<uint64_t> seeds =
        block.seeds.empty() ? std::vector<uint64_t>{spec.train.seed} : block.seeds;
    for (const std::string& scale_name : block.scales) {
      const ScaleSpec* scale = spec.FindScale(scale_name);
      if (scale == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            spec.Where(block.field + ".scale", block.line), "undefined scale '", scale_name, "'"));
      }
      for (int64_t context : block.context) {
        for (size_t budget = 0; budget < block.budget_values.size(); ++budget) {
          for (uint64_t seed : seeds) {
            for (const GridPoint& point : points) {
              ASSIGN_OR_RETURN(ResolvedJob job,
                               Resolve(spec, block, *scale, context, budget, seed, point));
              if (seen.insert(job.file.id).second) jobs.push_back(std::move(job));
            }
          }
        }
      }
    }
  }
  RETURN_IF_ERROR(AddLrScan(spec, &jobs));
  if (static_cast<int64_t>(jobs.size()) > max_jobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.source, ":", spec.train.lr_scan_line, ": train.lr_scan: the scan brings the sweep to ",
        jobs.size(), " jobs, more than the limit of ", max_jobs,
        " (fewer factors or scales, or raise the limit with --max-jobs)"));
  }
  RETURN_IF_ERROR(MakeCooldownBranches(spec, &jobs));
  if (spec.resources.adaptive_order &&
      std::none_of(jobs.begin(), jobs.end(),
                   [](const ResolvedJob& j) { return j.dense_law_point(); })) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.source, ":", spec.resources.order_line,
        ": resources.order: adaptive steers by the dense law, and this sweep has no dense job "
        "for it to fit (add a dense block or baseline, or use order: cheapest)"));
  }
  return jobs;
}

}  // namespace xmod
