// The store's row types: plain structs with no SQLite in them, for the code that
// prints, sends, sums or fits rows (the CLI's printer, the remote client,
// progress, the dashboard, the reports and the law-driven order) without
// including the store itself.
//
// Two kinds of read come back. A QueryResult is a table for display: cells of
// whatever kind SQLite holds, printed or relayed as they are (`xmod sql`,
// `xmod results`, `xmod curves`). Every other read is a typed row below, read by
// the store, where a value that may be missing says so in its type:
// std::optional is empty for a NULL, and nothing reads a NULL as 0 behind the
// caller's back (the exceptions are named in each struct).
#ifndef XMOD_ORCHESTRATOR_STORE_ROWS_H_
#define XMOD_ORCHESTRATOR_STORE_ROWS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/accounting.h"
#include "common/job_state.h"
#include "orchestrator/rules/lease_rules.h"

namespace xmod {

// A cell of a display table: NULL, integer, real or text.
using Value = std::variant<std::monostate, int64_t, double, std::string>;

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
};

// What a job is in a sweep with cooldown branches (docs/schedules.md): trained
// alone, the constant-LR trunk its branches start from (never a law point), or
// such a branch.
enum class JobRole { kRun, kTrunk, kBranch };

// "run", "trunk", "branch", as stored in jobs.role.
std::string_view JobRoleName(JobRole role);
// Inverse of JobRoleName; INVALID_ARGUMENT for any other name.
absl::StatusOr<JobRole> ParseJobRole(std::string_view name);

// One job of a sweep as the job_results view gives it (schema/README.md), with
// the granularity SqliteStore::JobResults adds: what the reports, the laws, the
// dashboard's comparison views and the law-driven order read.
//
// Missing values: a final evaluation value the job has not reported (yet) is an
// empty optional. The counts that only some families have (experts, top_k,
// granularity) and the config fields an older xmod did not record (seed,
// n_embedding, matched_to, the keys) read as 0 or "" when absent.
struct JobResultRow {
  std::string id;
  Family family = Family::kDense;
  std::string scale;
  JobState state = JobState::kPending;
  JobRole role = JobRole::kRun;
  std::string budget_kind;  // tokens_per_param, flops or tokens
  // The config without seed, id, scale, priority and parent: replicates share it.
  std::string config_key;
  // What the bootstrap resamples: config_key, or a branch's trunk configuration.
  std::string cluster_key;
  std::string matched_to;          // a sized baseline: what it was sized against
  int64_t experts = 0, top_k = 0;  // moe, deco
  int64_t granularity = 0;         // moe: d_ff / d_e
  double sparsity = 0.0, capacity = 1.0, budget_value = 0.0;
  int64_t stride = 1, context = 0, tokens = 0, tokens_trained = 0, n_layers = 0, seed = 0;
  double n_total = 0.0, n_active = 0.0, n_embedding = 0.0, flops_per_token = 0.0, train_flops = 0.0;
  std::optional<double> final_val_loss, final_val_loss_causal, final_val_loss_se,
      final_val_loss_causal_se, final_capacity, final_capacity_causal, final_flops_ratio_causal;

  // Not the dense model (an X-MoD, MoD, MoE or DECO run).
  bool routed() const { return !IsDenseRun(family, stride); }
  // A token-choice expert baseline (moe, deco): every token passes every layer, so
  // its trained routing is already causal and it has only the top-k losses.
  bool experts_family() const { return IsExpertFamily(family); }
  // Whether its laws and plots read the threshold-routed (causal) losses: a
  // routed run of a family evaluated with causal routing (X-MoD, MoD).
  bool causal_metric() const { return routed() && Traits(family).causal_eval; }
  // A baseline sized against an X-MoD point ("xmod sparsity S stride s"): true
  // with that point's sparsity and stride; false when sized against the dense
  // model or not a sized baseline.
  bool MatchedXmodPoint(double* sparsity, int64_t* stride) const;
  // The final loss `metric` selects: "val_loss" the top-k loss for every family;
  // "auto" (or "val_loss_causal") the causal loss where causal_metric(), else
  // the top-k loss. Empty when the job has not reported it.
  std::optional<double> Loss(const std::string& metric) const;
};

// A failed job of some sweep, as the dashboard lists it.
struct FailedJobRow {
  std::string sweep, job_id;
  Family family = Family::kDense;
  std::string scale;
  int64_t attempts = 0;
  double updated_at = 0.0;  // when it failed, seconds since the epoch
  std::string reason;       // the job's status_reason ("" when none was recorded)
};

// The span of one attempt's train-loss rows: differences between the last and
// the first row.
struct TrainSpanRow {
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0.0;  // of wall time
};

// One lease of a job (the attempts table).
struct AttemptRow {
  int64_t attempt = 0;
  std::optional<std::string> worker_id;
  std::string status;  // how it ended, or leased / running while it lasts
  int64_t resumed_from_step = 0;
  double started_at = 0.0;
  std::optional<double> ended_at;     // empty while it lasts
  std::optional<std::string> reason;  // empty when none was recorded
};

// A recorded checkpoint of a job.
struct CheckpointRow {
  int64_t step = 0, attempt = 0;
  std::string path, checksum;
  double created_at = 0.0;
};

// Everything the dashboard's job page shows of one job.
struct JobRecord {
  QueryResult result;                      // its job_results row (one row; the view's columns)
  std::string config_json;                 // the resolved job, as submitted
  std::vector<AttemptRow> attempts;        // by attempt
  std::vector<CheckpointRow> checkpoints;  // by step
};

// A stored fit (the fits table).
struct FitRow {
  int64_t fit_id = 0;
  std::string law, method;
  int64_t n_points = 0;
  std::string points_hash;
  double objective = 0.0, rmse = 0.0;
  std::optional<std::string> holdout_scale;  // empty: every scale was fitted
  double created_at = 0.0;
  std::string params_json, result_json;
};

// The text a sweep was last submitted with.
struct SweepText {
  std::string yaml;
  std::string source;  // the path it was submitted from
};

// One step of a job's curve (the job_curves view); a metric the step has no
// value for is empty.
struct CurvePoint {
  int64_t step = 0;
  int64_t tokens = 0;
  double flops = 0.0;
  std::optional<double> train_loss, val_loss, val_loss_causal, lr, grad_norm;
};

struct SubmitResult {
  int64_t jobs_in_spec = 0;  // distinct jobs the expansion produced
  int64_t new_jobs = 0;      // jobs that did not exist in the database before
  int64_t linked_jobs = 0;   // jobs that existed (e.g. in another sweep) and now belong to this one
  bool sweep_created = false;
};

// One fitted law, as `xmod fit SWEEP` stores it.
struct FitRecord {
  std::string law;
  std::string points_hash;  // of the points fitted (analysis.h PointsHash)
  int64_t n_points = 0;
  std::string params_json;  // {"E": ..., ...}
  double objective = 0.0;
  double rmse = 0.0;
  std::string result_json;    // the whole report, as `xmod fit --format json` prints it
  std::string method;         // "single", "two-stage" or "joint"
  std::string holdout_scale;  // empty: every scale was fitted
};

struct StateCounts {
  std::string sweep;
  std::map<JobState, int64_t> counts;  // every state present, zero where none
  int64_t total = 0;
};

// One metric value at one step of one job.
struct MetricPoint {
  std::string job_id;
  std::string name;
  int64_t step = 0;
  double value = 0.0;
  int64_t tokens = 0;  // tokens seen by the job up to and including this step
  double flops = 0.0;  // training FLOPs spent up to and including this step
  int64_t attempt = 0;
  double wall_time = 0.0;  // seconds since the epoch
};

// What a lease hands a worker group.
struct LeaseGrant {
  std::string job_id;
  std::string config_json;  // the resolved job
  int64_t attempt = 0;
  int64_t fencing_token = 0;
  int64_t resume_step = 0;        // 0: start fresh
  std::string resume_checkpoint;  // path of that checkpoint
  // Ranks of the group that wrote it (0: fresh or unknown): the batch does not
  // depend on the rank count, so a different count resumes the same run.
  int64_t resume_ranks = 0;
};

struct JobProgressRow {
  std::string job_id, family, scale, status;
  double sparsity = 0.0, train_flops = 0.0;
  int64_t stride = 1, context = 0, attempt = 0, step = 0, steps = 0;
  int64_t start_step = 0;         // a cooldown branch's first step is start_step + 1
  double standalone_flops = 0.0;  // trained alone from step 0 (0 for a trunk)
  std::optional<double> final_val_loss;

  bool in_flight() const {
    auto state = ParseJobState(status);
    return state.ok() && IsHeld(*state);
  }
  // Training FLOPs done: all of a succeeded job, the reported share of one in flight.
  double flops_done() const {
    if (status == "succeeded") return train_flops;
    if (!in_flight() || steps <= 0) return 0.0;
    const double span = static_cast<double>(steps - start_step);
    if (span <= 0) return 0.0;
    return train_flops * std::clamp(static_cast<double>(step - start_step) / span, 0.0, 1.0);
  }
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_ROWS_H_
