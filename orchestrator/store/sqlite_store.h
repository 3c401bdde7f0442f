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
#include "common/clock.h"
#include "common/job_state.h"
#include "orchestrator/rules/lease_rules.h"
#include "orchestrator/store/rows.h"
#include "orchestrator/store/store_reader.h"
#include "orchestrator/store/write_faults.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

struct sqlite3;
struct sqlite3_stmt;

namespace xmod {

// Leases by job id -> fencing token.
using LeaseTokens = std::map<std::string, int64_t>;

// The status a caller should act on for an SQLite result code (primary or
// extended): busy or locked, and I/O errors, are UNAVAILABLE (nothing was
// written; try again, as workers do); a full disk or memory is
// RESOURCE_EXHAUSTED; a damaged file or one that is not a database is
// DATA_LOSS; a read-only file or a broken constraint is FAILED_PRECONDITION;
// anything else INTERNAL. Errors keep SQLite's message and the file's path.
absl::StatusCode SqliteStatusCode(int sqlite_code);

class SqliteStore : public StoreReader {
 public:
  struct Options {
    std::string path;               // a file, or ":memory:"
    bool read_only = false;         // open existing file only; refuse every write statement
    WriteFaults* faults = nullptr;  // not owned; must outlive the store
    int busy_timeout_ms = 10000;
    bool durable = true;     // synchronous=FULL; false: NORMAL (not power-loss safe)
    Clock* clock = nullptr;  // not owned; the system clock when null
  };

  // Opens (creating unless read_only) and migrates. NOT_FOUND: read_only and no
  // file. FAILED_PRECONDITION: the file's schema is newer than this binary, or
  // (read_only) older. INTERNAL: SQLite refused.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(Options options);
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  // The clock the store stamps rows with; the scheduler reads the same one.
  Clock& clock() const { return options_.clock != nullptr ? *options_.clock : system_clock_; }
  double Now() override { return clock().Now(); }

  // Records the sweep (creating it, or updating its text when it changed) and
  // inserts every job not yet present, in one transaction. Jobs already present
  // are left as they are (status, metrics) and linked to the sweep.
  absl::StatusOr<SubmitResult> SubmitSweep(const SweepSpec& spec,
                                           const std::vector<ResolvedJob>& jobs);

  // Jobs per state, one entry per sweep (all sweeps when `sweep` is empty), by name.
  // NOT_FOUND for a named sweep that does not exist.
  absl::StatusOr<std::vector<StateCounts>> CountStates(const std::string& sweep);

  // ---- Named reads (store_reader.h says what each returns) --------------------
  // NOT_FOUND for an unknown sweep or job.
  absl::StatusOr<QueryResult> JobResults(const std::string& sweep) override;
  absl::StatusOr<std::vector<JobResultRow>> JobResultRows(const std::string& sweep) override;
  absl::StatusOr<std::vector<CurvePoint>> CurvePoints(const std::string& job_id) override;
  absl::StatusOr<std::vector<std::string>> SweepJobIds(
      const std::string& sweep, const std::vector<JobState>& states) override;
  absl::StatusOr<std::vector<FailedJobRow>> FailedJobs() override;
  absl::StatusOr<std::optional<TrainSpanRow>> TrainSpan(const std::string& job_id,
                                                        int64_t attempt) override;
  absl::StatusOr<JobRecord> JobDetail(const std::string& job_id) override;
  absl::StatusOr<std::vector<FitRow>> Fits(const std::string& sweep) override;
  absl::StatusOr<std::optional<FitRow>> LatestFit(const std::string& sweep,
                                                  const std::string& law) override;
  absl::StatusOr<int64_t> SweepDataVersion(const std::string& sweep) override;
  absl::StatusOr<int64_t> JobDataVersion(const std::string& job_id) override;

  // Rows of the job_curves view for one job, by step: a table for display
  // (`xmod curves`). NOT_FOUND for an unknown job.
  absl::StatusOr<QueryResult> JobCurve(const std::string& job_id);

  absl::StatusOr<SweepText> SweepSpecText(const std::string& sweep) override;
  // Every sweep's name, in name order.
  absl::StatusOr<std::vector<std::string>> SweepNames();
  // The names of the sweeps holding any of `job_ids` (unknown ids hold none), in
  // name order.
  absl::StatusOr<std::vector<std::string>> SweepsOf(const std::vector<std::string>& job_ids);

  // Appends a fit of `sweep`'s results to the `fits` table; returns its fit_id.
  // NOT_FOUND when there is no such sweep.
  absl::StatusOr<int64_t> RecordFit(const std::string& sweep, const FitRecord& fit);

  // Failed and cancelled jobs of the sweep (or the one job whose id is
  // `sweep_or_job`) back to pending, with a fresh attempt budget; returns how
  // many. NOT_FOUND names the argument when it is neither.
  absl::StatusOr<int64_t> ResumeSweep(const std::string& sweep_or_job);

  // A sweep's tags (sorted) and note (`xmod tag`). NOT_FOUND for no such sweep.
  struct SweepLabels {
    std::vector<std::string> tags;
    std::string note;
  };
  absl::StatusOr<SweepLabels> SweepTags(const std::string& sweep);
  // Adds and removes tags and, when `note` is set, replaces the note (an empty
  // one clears it), in one transaction; returns the labels after. INVALID_ARGUMENT
  // for a tag that is empty, longer than 64 bytes or holds a comma or white space.
  absl::StatusOr<SweepLabels> SetSweepTags(const std::string& sweep,
                                           const std::vector<std::string>& add,
                                           const std::vector<std::string>& remove,
                                           const std::optional<std::string>& note);
  // Pending, leased and running jobs of the sweep (or the one job whose id is
  // `sweep_or_job`) to cancelled; returns how many.
  absl::StatusOr<int64_t> Cancel(const std::string& sweep_or_job);
  // The law-driven order (docs/order.md): sets each listed job's lease order key
  // (nullopt: clears it, so the job leases by its own FLOPs again), for the jobs
  // that are still pending; a job leased meanwhile is left alone. All in one
  // transaction. Returns how many rows changed.
  absl::StatusOr<int64_t> SetOrderKeys(
      const std::vector<std::pair<std::string, std::optional<double>>>& keys);

  // Runs one read-only statement of the user's (`xmod sql`; tests inspect files
  // with it too). No code of xmod builds SQL for it: every other read is named
  // above. INVALID_ARGUMENT when the statement would write, or does not parse.
  absl::StatusOr<QueryResult> Query(const std::string& sql);

  // ---- Leases (used by orchestrator/scheduler) ----------------------------------
  // Records (or refreshes) a worker group; `build` (its build and libraries as
  // JSON, or empty) is copied into each attempt it is granted.
  absl::Status UpsertWorker(const std::string& worker_id, const std::string& host, int64_t ranks,
                            double now, const std::string& build = "");

  // The builds behind a sweep's jobs (all sweeps when empty): for each job with
  // an attempt, its newest attempt's commit ("" when the group sent none).
  absl::StatusOr<std::map<std::string, std::string>> JobCommits(const std::string& sweep);

  // The ranks of a registered worker group; NOT_FOUND when unknown.
  absl::StatusOr<int64_t> WorkerRanks(const std::string& worker_id);

  // In one transaction: claims the first pending job in lease order
  // (LeasesBefore) whose batch splits over `group_ranks` (BatchSplitsOver), raises its attempt,
  // issues a new fencing token, finds its newest checkpoint and deletes its metric rows past that
  // step. nullopt when no job is pending. `request_id` (may be empty) is the
  // group's id for this call: a retry with the same id whose lease no heartbeat
  // has confirmed yet (the answer was lost) gets that lease back unchanged (same
  // attempt, token, resume point and expiry) instead of a second one.
  absl::StatusOr<std::optional<LeaseGrant>> LeaseNextJob(const std::string& worker_id,
                                                         int64_t group_ranks, double now,
                                                         double ttl,
                                                         const std::string& request_id = "");

  // Extends the lease and records the step; a leased job becomes running. Returns
  // the job's state: kCancelled means the holder must stop (nothing is written).
  // FAILED_PRECONDITION: the token is stale, the job is not held, or `worker_id`
  // is not the worker the lease was granted to. NOT_FOUND: no job.
  absl::StatusOr<JobState> RenewLease(const std::string& job_id, const std::string& worker_id,
                                      int64_t token, int64_t step, double now, double ttl);

  // The one way metrics are written: a batch, in one transaction, from the
  // current holder only. The token must be current (FAILED_PRECONDITION; NOT_FOUND
  // for an unknown job), and for each name the steps must not go below what this
  // attempt already stored (INVALID_ARGUMENT); a row this attempt already stored
  // may be sent again with the same value. Rows carry the job's current attempt.
  // Nothing is written on any error.
  absl::Status AppendFencedMetrics(const std::string& job_id, int64_t token,
                                   const std::vector<MetricPoint>& points, double wall_time);

  // A checkpoint of the current attempt: its step must be new work of the attempt
  // (after the step it resumed from, at most the job's steps) and its path the
  // checkpoint folder of that job and step (CheckCheckpointPath); INVALID_ARGUMENT
  // otherwise, nothing written.
  absl::Status RecordCheckpoint(const std::string& job_id, int64_t token, int64_t step,
                                const std::string& path, const std::string& checksum, double now);

  // Ends the current attempt at `step` (a success only at the job's last step, a
  // failure within 0..steps: INVALID_ARGUMENT otherwise); returns the job's new state.
  absl::StatusOr<JobState> EndAttempt(const std::string& job_id, int64_t token, AttemptEnd end,
                                      int64_t step, const std::string& reason, double now);

  // Every lease that ran out before `now` ends as a counted failure ("lease
  // expired"); returns how many. A lease in `not_counted` (job id -> fencing token,
  // with the job still at that token) ends as preempted instead: it was held when a
  // coordinator restarted and its group never came back, so the outage was the
  // coordinator's, not the job's.
  absl::StatusOr<int64_t> ExpireLeases(double now, const LeaseTokens& not_counted = {});

  // The leases held now; with `latest_expiry`, also when the last of them runs out
  // (0 when none is held).
  absl::StatusOr<LeaseTokens> HeldLeases(double* latest_expiry = nullptr);

  // Moves every lease's expiry to at least `until` (a restarted coordinator gives
  // the groups it could not hear from a full TTL to reconnect); returns how many.
  absl::StatusOr<int64_t> ExtendLeases(double until);

  // Jobs pending, leased or running, over every sweep.
  absl::StatusOr<int64_t> CountActiveJobs();

  // When the first attempt of any of the sweep's jobs began; 0 when none has.
  absl::StatusOr<double> SweepStartedAt(const std::string& sweep);

  // Per-job progress of one sweep (NOT_FOUND for an unknown sweep).
  absl::StatusOr<std::vector<JobProgressRow>> JobProgress(const std::string& sweep);

  // ---- For tests only ---------------------------------------------------------
  // No production code calls these: jobs move only through the lease rules above
  // (and resume and cancel). Tests use them to set up and inspect states.
  // PRAGMA user_version.
  absl::StatusOr<int> SchemaVersion();

  // The job's current state. NOT_FOUND for an unknown job.
  absl::StatusOr<JobState> GetJobState(const std::string& job_id);

  // Moves one job to `to`. NOT_FOUND: unknown job. FAILED_PRECONDITION: the move
  // is not allowed from the job's current state (nothing is written).
  absl::Status TransitionJob(const std::string& job_id, JobState to, const std::string& reason);

 private:
  class Statement;
  class Row;
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
  // Inserts `spec`'s sweep row, or rewrites its text when it differs; returns the
  // sweep's id and sets *created (a new row) and *changed (an existing row rewritten).
  absl::StatusOr<int64_t> WriteSweepRowLocked(const SweepSpec& spec, double now, bool* created,
                                              bool* changed);
  absl::StatusOr<SweepLabels> SweepTagsLocked(const std::string& sweep);
  // The jobs of the sweep named `sweep_or_job`, or else that one id (which may not exist).
  absl::StatusOr<std::vector<std::string>> SweepOrJobLocked(const std::string& sweep_or_job);
  // Raise the data version (SweepDataVersion) of one sweep, or of every sweep
  // holding the job. Every write that changes what a sweep's answers show calls
  // one of them in its transaction: a submit, a lease, a heartbeat, metrics, a
  // checkpoint, an attempt's end, resume and cancel, a fit. (Order keys,
  // expiry extensions and workers are not shown, and do not.)
  absl::Status NoteSweepChangedLocked(int64_t sweep_id);
  absl::Status NoteJobChangedLocked(const std::string& job_id);
  // Keep job_metric_summary (schema/0009) as the job_results view reads it: after
  // a batch of new rows up to step `highest` (`evaluated`: some of them named
  // val_*, which the final values read), and after rows were deleted.
  absl::Status SummarizeMetricsLocked(const std::string& job_id, int64_t highest, bool evaluated);
  absl::Status ResummarizeMetricsLocked(const std::string& job_id);
  // NOT_FOUND unless the job exists.
  absl::Status RequireJobLocked(const std::string& job_id);
  // The sweep's fits, newest first; with `law`, only the newest of that law.
  absl::StatusOr<std::vector<FitRow>> FitsLocked(const std::string& sweep, const std::string* law);
  absl::StatusOr<QueryResult> CollectLocked(Statement* statement);
  // Steps `statement` to the end, handing each row to `row` (stops at its first
  // error, which it returns), then resets it.
  absl::Status EachRowLocked(Statement* statement,
                             const std::function<absl::Status(const Row&)>& row);
  absl::StatusOr<int64_t> MoveJobsLocked(const std::vector<std::string>& job_ids,
                                         const std::vector<JobState>& from, JobState to,
                                         const std::string& reason);
  // The connection's last error, as SqliteStatusCode maps it.
  absl::Status SqlError(const std::string& context);
  // An injected fault, mapped the same way.
  absl::Status FaultLocked(std::string_view what);
  // The job's status and token, checked against `token`: FAILED_PRECONDITION when
  // stale or not held (unless allow_cancelled and the job was cancelled under it),
  // or, given a `holder`, when a held job was leased to another worker.
  // With `attempt`, also what the step rules (lease_rules.h) need: the job's
  // steps, the last heartbeat step, and the step the current attempt resumed from.
  absl::StatusOr<JobState> CheckFenceLocked(const std::string& job_id, int64_t token,
                                            bool allow_cancelled,
                                            const std::string* holder = nullptr,
                                            AttemptSteps* attempt = nullptr);
  absl::Status EndAttemptLocked(const std::string& job_id, JobState from, AttemptEnd end,
                                const std::string& reason, double now, JobState* to);
  // Cancels the pending cooldown branches of `trunk_id` once it has ended (any
  // way) without recording the checkpoint a branch starts from: they could never
  // be leased. The reason names the trunk, its state and the step.
  absl::Status CancelStrandedBranchesLocked(const std::string& trunk_id, double now);
  // The three steps of LeaseNextJob. The lease `request_id` made for the worker
  // and no heartbeat has confirmed, as it was; nullopt when there is none.
  absl::StatusOr<std::optional<LeaseGrant>> ReplayLeaseLocked(const std::string& worker_id,
                                                              const std::string& request_id);
  // The first leasable job in lease order whose batch splits over `group_ranks`;
  // "" when there is none.
  absl::StatusOr<std::string> PickJobLocked(int64_t group_ranks);
  // Leases `job_id` (pending) to the worker: the next attempt, a new fencing
  // token, the resume point, the metric rows past it deleted, the attempt row.
  absl::StatusOr<LeaseGrant> GrantLeaseLocked(const std::string& job_id,
                                              const std::string& worker_id, double now, double ttl,
                                              const std::string& request_id);
  // Where g->job_id resumes: its newest checkpoint (or, with step >= 0, the one at
  // that step), else a cooldown branch's trunk checkpoint at its start; fills
  // resume_step, resume_checkpoint and resume_ranks (the writing group's ranks, 0
  // when unknown). Leaves g as it is when there is none.
  absl::Status FindResumePointLocked(int64_t step, LeaseGrant* g);
  double Now() const;

  struct Writer {
    const std::function<absl::Status()>* body;
    absl::Status status;
    bool done = false;  // guarded by queue_mu_
    std::condition_variable cv;
  };
  static constexpr size_t kMaxGroup = 128;

  Options options_;
  mutable SystemClock system_clock_;
  std::mutex queue_mu_;          // guards writers_; never held while mu_ is taken
  std::deque<Writer*> writers_;  // guarded by queue_mu_
  std::mutex mu_;
  sqlite3* db_ = nullptr;                                         // guarded by mu_
  std::map<std::string, std::unique_ptr<Statement>> statements_;  // guarded by mu_
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_SQLITE_STORE_H_
