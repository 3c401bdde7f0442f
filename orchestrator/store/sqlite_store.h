// The SQLite store: the only code in xmod that speaks SQL. It owns one
// connection, applies the numbered migrations of schema/ on open, and enforces
// the job state machine of common/job_state.h on every status change.
//
// Writes run in BEGIN IMMEDIATE transactions with prepared statements; a batch
// (a submitted sweep, a metric batch) is one transaction, so a failure anywhere
// in it leaves the database as it was. The file runs in WAL mode with
// synchronous=FULL: a commit is on disk when the call returns, so neither a
// process crash nor a power loss takes back a row a worker was told is stored
// (synchronous=NORMAL, Options::durable = false, survives process crashes only;
// coordinator_bench measures both).
//
// Thread-safe: one mutex serializes all use of the connection; concurrent
// writers are grouped into one transaction (each still atomic on its own). Processes that only read
// open their own store with read_only = true.
#ifndef XMOD_ORCHESTRATOR_STORE_SQLITE_STORE_H_
#define XMOD_ORCHESTRATOR_STORE_SQLITE_STORE_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_state.h"
#include "orchestrator/store/write_faults.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

struct sqlite3;
struct sqlite3_stmt;

namespace xmod {

// A cell of a query result: NULL, integer, real or text.
using Value = std::variant<std::monostate, int64_t, double, std::string>;

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
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
};

// How an attempt ended, as the worker group (or the lease clock) says.
enum class AttemptEnd {
  kSucceeded,
  kPreempted,       // back to pending; does not count toward max_attempts
  kRetryableError,  // counts; pending again while attempts remain, else failed
  kFatalError,      // failed
  kDiverged,        // failed
};

struct JobProgressRow {
  std::string job_id, family, scale, status;
  double sparsity = 0.0, train_flops = 0.0;
  int64_t stride = 1, context = 0, attempt = 0, step = 0, steps = 0;
  std::optional<double> final_val_loss;

  bool in_flight() const { return status == "leased" || status == "running"; }
  // Training FLOPs done: all of a succeeded job, the reported share of one in flight.
  double flops_done() const {
    if (status == "succeeded") return train_flops;
    if (!in_flight() || steps <= 0) return 0.0;
    return train_flops * std::min(1.0, static_cast<double>(step) / static_cast<double>(steps));
  }
};

class SqliteStore {
 public:
  struct Options {
    std::string path;               // a file, or ":memory:"
    bool read_only = false;         // open existing file only; refuse every write statement
    WriteFaults* faults = nullptr;  // not owned; must outlive the store
    int busy_timeout_ms = 10000;
    bool durable = true;          // synchronous=FULL; false: NORMAL (not power-loss safe)
    std::function<double()> now;  // seconds since the epoch; wall clock when empty
  };

  // Opens (creating unless read_only) and migrates. NOT_FOUND: read_only and no
  // file. FAILED_PRECONDITION: the file's schema is newer than this binary, or
  // (read_only) older. INTERNAL: SQLite refused.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(Options options);
  ~SqliteStore();
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  // PRAGMA user_version.
  absl::StatusOr<int> SchemaVersion();

  // Records the sweep (creating it, or updating its text when it changed) and
  // inserts every job not yet present, in one transaction. Jobs already present
  // are left as they are (status, metrics) and linked to the sweep.
  absl::StatusOr<SubmitResult> SubmitSweep(const SweepSpec& spec,
                                           const std::vector<ResolvedJob>& jobs);

  // Jobs per state, one entry per sweep (all sweeps when `sweep` is empty), by name.
  // NOT_FOUND for a named sweep that does not exist.
  absl::StatusOr<std::vector<StateCounts>> CountStates(const std::string& sweep);

  // Rows of the job_results view for one sweep, cheapest job first.
  absl::StatusOr<QueryResult> JobResults(const std::string& sweep);

  // Rows of the job_curves view for one job, by step. NOT_FOUND for an unknown job.
  absl::StatusOr<QueryResult> JobCurve(const std::string& job_id);

  // Appends a fit of `sweep`'s results to the `fits` table; returns its fit_id.
  // NOT_FOUND when there is no such sweep.
  absl::StatusOr<int64_t> RecordFit(const std::string& sweep, const FitRecord& fit);

  // The job's current state. NOT_FOUND for an unknown job.
  absl::StatusOr<JobState> GetJobState(const std::string& job_id);

  // Moves one job to `to`. NOT_FOUND: unknown job. FAILED_PRECONDITION: the move
  // is not allowed from the job's current state (nothing is written).
  absl::Status TransitionJob(const std::string& job_id, JobState to, const std::string& reason);

  // Failed and cancelled jobs of the sweep back to pending, with a fresh attempt
  // budget; returns how many.
  absl::StatusOr<int64_t> ResumeSweep(const std::string& sweep);
  // Pending, leased and running jobs of the sweep (or the one job whose id is
  // `sweep_or_job`) to cancelled; returns how many.
  absl::StatusOr<int64_t> Cancel(const std::string& sweep_or_job);

  // Inserts a batch in one transaction. A point already stored for (job, name,
  // step) is replaced when the new one comes from the same or a later attempt.
  // NOT_FOUND when a job does not exist (nothing is written).
  absl::Status AppendMetrics(const std::vector<MetricPoint>& points);

  // Runs one read-only statement. INVALID_ARGUMENT when the statement would
  // write, or does not parse.
  absl::StatusOr<QueryResult> Query(const std::string& sql);

  // ---- Leases (used by orchestrator/scheduler) ----------------------------------
  // Records (or refreshes) a worker group.
  absl::Status UpsertWorker(const std::string& worker_id, const std::string& host, int64_t ranks,
                            double now);

  // The ranks of a registered worker group; NOT_FOUND when unknown.
  absl::StatusOr<int64_t> WorkerRanks(const std::string& worker_id);

  // In one transaction: claims the first pending job (priority, then cheapest)
  // whose batch splits over `group_ranks`, raises its attempt, issues a new fencing
  // token, finds its newest checkpoint and deletes its metric rows past that step.
  // nullopt when no job is pending.
  absl::StatusOr<std::optional<LeaseGrant>> LeaseNextJob(const std::string& worker_id,
                                                         int64_t group_ranks, double now,
                                                         double ttl);

  // Extends the lease and records the step; a leased job becomes running. Returns
  // the job's state: kCancelled means the holder must stop (nothing is written).
  // FAILED_PRECONDITION: the token is stale, the job is not held, or `worker_id`
  // is not the worker the lease was granted to. NOT_FOUND: no job.
  absl::StatusOr<JobState> RenewLease(const std::string& job_id, const std::string& worker_id,
                                      int64_t token, int64_t step, double now, double ttl);

  // AppendMetrics for the current holder only: the token must be current, and for
  // each name the steps must not go below what this attempt already stored
  // (INVALID_ARGUMENT). Nothing is written on any error.
  absl::Status AppendFencedMetrics(const std::string& job_id, int64_t token,
                                   const std::vector<MetricPoint>& points, double wall_time);

  absl::Status RecordCheckpoint(const std::string& job_id, int64_t token, int64_t step,
                                const std::string& path, const std::string& checksum, double now);

  // Ends the current attempt; returns the job's new state.
  absl::StatusOr<JobState> EndAttempt(const std::string& job_id, int64_t token, AttemptEnd end,
                                      const std::string& reason, double now);

  // Every lease that ran out before `now` ends as a counted failure ("lease
  // expired"); returns how many.
  absl::StatusOr<int64_t> ExpireLeases(double now);

  // Moves every lease's expiry to at least `until` (a restarted coordinator gives
  // the groups it could not hear from a full TTL to reconnect); returns how many.
  absl::StatusOr<int64_t> ExtendLeases(double until);

  // Jobs pending, leased or running, over every sweep.
  absl::StatusOr<int64_t> CountActiveJobs();

  // When the first attempt of any of the sweep's jobs began; 0 when none has.
  absl::StatusOr<double> SweepStartedAt(const std::string& sweep);

  // Per-job progress of one sweep (NOT_FOUND for an unknown sweep).
  absl::StatusOr<std::vector<JobProgressRow>> JobProgress(const std::string& sweep);

 private:
  class Statement;
  explicit SqliteStore(Options options);

  absl::Status Init();
  absl::Status MigrateLocked();
  absl::StatusOr<Statement*> PrepareLocked(const std::string& sql);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on any error.
  absl::Status TransactionLocked(const std::function<absl::Status()>& body);
  // Runs `body` atomically (all of its writes or none) with mu_ held, batched with
  // other callers' bodies into one transaction. Takes mu_ itself: callers must
  // not hold it.
  absl::Status Write(const std::function<absl::Status()>& body);
  absl::Status ExecLocked(const std::string& sql);
  // One statement through the prepared-statement cache.
  absl::Status StepCachedLocked(const std::string& sql);
  // Consults the fault seam, then steps a write statement to completion.
  absl::Status WriteLocked(Statement* statement, std::string_view what);
  absl::StatusOr<int64_t> SweepIdLocked(const std::string& sweep);
  absl::StatusOr<QueryResult> CollectLocked(Statement* statement);
  absl::StatusOr<int64_t> MoveJobsLocked(const std::vector<std::string>& job_ids,
                                         const std::vector<JobState>& from, JobState to,
                                         const std::string& reason);
  absl::Status SqlError(const std::string& context);
  // The job's status and token, checked against `token`: FAILED_PRECONDITION when
  // stale or not held (unless allow_cancelled and the job was cancelled under it),
  // or, given a `holder`, when a held job was leased to another worker.
  absl::StatusOr<JobState> CheckFenceLocked(const std::string& job_id, int64_t token,
                                            bool allow_cancelled,
                                            const std::string* holder = nullptr);
  absl::Status EndAttemptLocked(const std::string& job_id, JobState from, AttemptEnd end,
                                const std::string& reason, double now, JobState* to);
  double Now() const;

  struct Writer {
    const std::function<absl::Status()>* body;
    absl::Status status;
    bool done = false;  // guarded by queue_mu_
    std::condition_variable cv;
  };
  static constexpr size_t kMaxGroup = 128;

  Options options_;
  std::mutex queue_mu_;          // guards writers_; never held while mu_ is taken
  std::deque<Writer*> writers_;  // guarded by queue_mu_
  std::mutex mu_;
  sqlite3* db_ = nullptr;                                         // guarded by mu_
  std::map<std::string, std::unique_ptr<Statement>> statements_;  // guarded by mu_
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_SQLITE_STORE_H_
