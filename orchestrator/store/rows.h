// The store's row types: plain structs with no SQLite in them, for the code that
// prints, sends or sums rows (the CLI's printer, the remote client, progress)
// without including the store itself.
#ifndef XMOD_ORCHESTRATOR_STORE_ROWS_H_
#define XMOD_ORCHESTRATOR_STORE_ROWS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/job_state.h"
#include "orchestrator/rules/lease_rules.h"

namespace xmod {

// A cell of a query result: NULL, integer, real or text.
using Value = std::variant<std::monostate, int64_t, double, std::string>;

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
};

// Typed reads of a cell that never throw (a std::get of the wrong kind would end
// the coordinator): a number of the other kind is converted; NULL, or text where
// a number is read, reads as 0 or "".
inline int64_t AsInt(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return 0;
}
inline double AsReal(const Value& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return 0.0;
}
inline std::string AsText(const Value& v) {
  if (const auto* t = std::get_if<std::string>(&v)) return *t;
  return std::string();
}
// The cell at (row, column), or NULL when the result has no such cell.
inline const Value& Cell(const QueryResult& result, size_t row, size_t column) {
  static const Value kNull;
  if (row >= result.rows.size() || column >= result.rows[row].size()) return kNull;
  return result.rows[row][column];
}

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
