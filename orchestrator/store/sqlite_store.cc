#include "orchestrator/store/sqlite_store.h"

#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "orchestrator/store/cells.h"
#include "orchestrator/store/statement.h"
#include "schema/migrations.h"

namespace xmod {

namespace {

// The states a rule picks, as an SQL list: "('leased', 'running')". The rule
// lives in orchestrator/rules; the SQL only repeats its answer.
std::string StatesIn(bool (*rule)(JobState)) {
  std::vector<std::string> quoted;
  for (JobState s : StatesWhere(rule))
    quoted.push_back(absl::StrCat("'", std::string(JobStateName(s)), "'"));
  return absl::StrCat("(", absl::StrJoin(quoted, ", "), ")");
}

}  // namespace

SqliteStore::SqliteStore(Options options) : options_(std::move(options)) {}

SqliteStore::~SqliteStore() {
  statements_.clear();
  if (db_ != nullptr) sqlite3_close(db_);
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(Options options) {
  if (options.read_only && options.path != ":memory:" && !std::filesystem::exists(options.path)) {
    return absl::NotFoundError(absl::StrCat(options.path, ": no such database"));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(options)));
  RETURN_IF_ERROR(store->Init());
  return store;
}

double SqliteStore::Now() const { return clock().Now(); }

absl::StatusCode SqliteStatusCode(int sqlite_code) {
  switch (sqlite_code & 0xff) {
    case SQLITE_OK:
      return absl::StatusCode::kOk;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_CONSTRAINT:
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteStore::SqlError(const std::string& context) {
  const int code = db_ != nullptr ? sqlite3_extended_errcode(db_) : SQLITE_CANTOPEN;
  absl::StatusCode mapped = SqliteStatusCode(code);
  if (mapped == absl::StatusCode::kOk) mapped = absl::StatusCode::kInternal;
  return absl::Status(mapped, absl::StrCat(options_.path, ": ", context, ": ",
                                           db_ ? sqlite3_errmsg(db_) : "no database"));
}

absl::Status SqliteStore::FaultLocked(std::string_view what) {
  if (options_.faults == nullptr) return absl::OkStatus();
  std::optional<InjectedFault> fault = options_.faults->BeforeWrite(what);
  if (!fault.has_value()) return absl::OkStatus();
  return absl::Status(
      SqliteStatusCode(fault->sqlite_code),
      absl::StrCat(options_.path, ": ", fault->message, ": ", sqlite3_errstr(fault->sqlite_code)));
}

namespace {

// Whether a read-only open must read the file as immutable. A WAL database
// needs its -shm file even to be read, and SQLite cannot make one on a
// read-only filesystem (an archived sweep, a read-only mount of the cluster's
// results) or in a folder the reader may not write (a colleague's sweep). There
// it can read only as immutable, which is true on a read-only filesystem, and
// true in the other case while no writer is on the file: no -wal file exists.
// (A writer that starts during the read is not seen; reads are short.)
bool ReadAsImmutable(const std::string& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_RDONLY) != 0) return true;
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::absolute(path, ec).parent_path();
  return !ec && ::access(parent.c_str(), W_OK) != 0 && !std::filesystem::exists(path + "-wal", ec);
}

// "file:" URI of a path (RFC 3986 percent-encoding of what a URI would read).
std::string FileUri(const std::string& path, const std::string& query) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::strchr("/-._~", c) != nullptr) {
      uri += static_cast<char>(c);
    } else {
      uri += absl::StrFormat("%%%02X", c);
    }
  }
  return uri + "?" + query;
}

}  // namespace

absl::Status SqliteStore::Init() {
  std::lock_guard<std::mutex> lock(mu_);
  int flags =
      options_.read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  std::string name = options_.path;
  if (options_.read_only && options_.path != ":memory:" && ReadAsImmutable(options_.path)) {
    name = FileUri(options_.path, "immutable=1");
    flags |= SQLITE_OPEN_URI;
  }
  if (sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    return SqlError("cannot open");
  }
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
  sqlite3_extended_result_codes(db_, 1);
  if (options_.read_only) {
    ASSIGN_OR_RETURN(Statement * version, PrepareLocked("PRAGMA user_version"));
    if (sqlite3_step(version->get()) != SQLITE_ROW) return SqlError("reading the schema version");
    const int found = sqlite3_column_int(version->get(), 0);
    version->Reset();
    const int latest = SchemaMigrations().back().version;
    if (found != latest) {
      return absl::FailedPreconditionError(absl::StrCat(
          options_.path, ": schema version ", found, ", this xmod reads version ", latest,
          found < latest ? " (open it once with a writing command to migrate)" : ""));
    }
    return absl::OkStatus();
  }
  // SQLite opens a file it cannot write read-only without saying so; every
  // write would then fail later, one by one. Refuse it here, before anything.
  if (options_.path != ":memory:" && sqlite3_db_readonly(db_, "main") == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.path,
        ": the database file is read-only (its permissions, or a read-only filesystem); this "
        "command writes to it. Make it writable, or work on a writable copy; `xmod sql`, "
        "`xmod status --db` and `xmod results --db` read it as it is"));
  }
  RETURN_IF_ERROR(ExecLocked("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(
      ExecLocked(options_.durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(ExecLocked("PRAGMA foreign_keys=ON"));
  // A sweep's rows (10,000 resolved configs are ~20 MB) should stay in memory:
  // a larger page cache and memory-mapped reads instead of a pread per page.
  RETURN_IF_ERROR(ExecLocked("PRAGMA cache_size=-65536"));
  RETURN_IF_ERROR(ExecLocked("PRAGMA mmap_size=268435456"));
  return MigrateLocked();
}

absl::Status SqliteStore::ExecLocked(const std::string& sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    const std::string text = message ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    absl::StatusCode code = SqliteStatusCode(sqlite3_extended_errcode(db_));
    if (code == absl::StatusCode::kOk) code = absl::StatusCode::kInternal;
    return absl::Status(code, absl::StrCat(options_.path, ": ", text));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::MigrateLocked() {
  ASSIGN_OR_RETURN(Statement * version, PrepareLocked("PRAGMA user_version"));
  version->Reset();
  if (sqlite3_step(version->get()) != SQLITE_ROW) return SqlError("reading the schema version");
  const int current = sqlite3_column_int(version->get(), 0);
  version->Reset();
  const auto& migrations = SchemaMigrations();
  if (current > migrations.back().version) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.path, ": schema version ", current, " is newer than this xmod (",
                     migrations.back().version, "); upgrade xmod"));
  }
  if (current == migrations.back().version) return absl::OkStatus();
  // Foreign keys are off while migrations run (a migration may rebuild a table
  // others refer to, as SQLite's documented procedure for schema changes does)
  // and checked before each migration commits.
  RETURN_IF_ERROR(ExecLocked("PRAGMA foreign_keys=OFF"));
  for (const Migration& m : migrations) {
    if (m.version <= current) continue;
    absl::Status applied = TransactionLocked([&]() -> absl::Status {
      RETURN_IF_ERROR(FaultLocked(m.name));
      absl::Status s = ExecLocked(m.sql);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat("migration ", m.name, ": ", s.message()));
      }
      ASSIGN_OR_RETURN(Statement * check, PrepareLocked("PRAGMA foreign_key_check"));
      check->Reset();
      const int rc = sqlite3_step(check->get());
      check->Reset();
      if (rc == SQLITE_ROW) {
        return absl::InternalError(
            absl::StrCat("migration ", m.name, ": leaves rows whose foreign keys do not resolve"));
      }
      return ExecLocked(absl::StrCat("PRAGMA user_version=", m.version));
    });
    if (!applied.ok()) {
      (void)ExecLocked("PRAGMA foreign_keys=ON");
      return applied;
    }
  }
  return ExecLocked("PRAGMA foreign_keys=ON");
}

absl::StatusOr<SqliteStore::Statement*> SqliteStore::PrepareLocked(const std::string& sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) {
    it->second->Reset();
    return it->second.get();
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return SqlError(absl::StrCat("preparing '", sql.substr(0, 60), "'"));
  }
  auto owned = std::make_unique<Statement>(stmt);
  Statement* raw = owned.get();
  statements_.emplace(sql, std::move(owned));
  return raw;
}

absl::Status SqliteStore::TransactionLocked(const std::function<absl::Status()>& body) {
  if (options_.read_only) {
    return absl::FailedPreconditionError(absl::StrCat(options_.path, ": opened read-only"));
  }
  RETURN_IF_ERROR(StepCachedLocked("BEGIN IMMEDIATE"));
  absl::Status status = body();
  if (status.ok()) status = StepCachedLocked("COMMIT");
  if (!status.ok()) {
    // A failed COMMIT may already have rolled back; ROLLBACK then only reports that.
    if (!sqlite3_get_autocommit(db_)) ExecLocked("ROLLBACK").IgnoreError();
  }
  return status;
}

absl::Status SqliteStore::StepCachedLocked(const std::string& sql) {
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked(sql));
  const int rc = sqlite3_step(s->get());
  s->Reset();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return SqlError(sql);
  return absl::OkStatus();
}

absl::Status SqliteStore::Write(const std::function<absl::Status()>& body) {
  if (options_.read_only) {
    return absl::FailedPreconditionError(absl::StrCat(options_.path, ": opened read-only"));
  }
  // Group commit, as LevelDB's writer queue does it: callers queue their batch;
  // the one at the front runs every queued batch in one transaction, each inside
  // its own savepoint (so one batch's failure rolls back only itself), and hands
  // each caller its own status.
  Writer self;
  self.body = &body;
  std::unique_lock<std::mutex> queue_lock(queue_mu_);
  writers_.push_back(&self);
  while (!self.done && &self != writers_.front()) self.cv.wait(queue_lock);
  if (self.done) return self.status;
  std::vector<Writer*> batch(writers_.begin(),
                             writers_.begin() + std::min<size_t>(writers_.size(), kMaxGroup));
  queue_lock.unlock();
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status commit = TransactionLocked([&]() -> absl::Status {
      for (Writer* w : batch) {
        RETURN_IF_ERROR(StepCachedLocked("SAVEPOINT batch"));
        w->status = (*w->body)();
        if (!w->status.ok()) RETURN_IF_ERROR(StepCachedLocked("ROLLBACK TO batch"));
        RETURN_IF_ERROR(StepCachedLocked("RELEASE batch"));
      }
      return absl::OkStatus();
    });
    if (!commit.ok()) {
      for (Writer* w : batch) w->status = commit;
    }
  }
  queue_lock.lock();
  for (Writer* w : batch) {
    writers_.pop_front();
    w->done = true;
    if (w != &self) w->cv.notify_one();
  }
  if (!writers_.empty()) writers_.front()->cv.notify_one();
  return self.status;
}

absl::Status SqliteStore::WriteLocked(Statement* statement, std::string_view what) {
  RETURN_IF_ERROR(FaultLocked(what));
  const int rc = sqlite3_step(statement->get());
  statement->Reset();
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return SqlError(std::string(what));
  return absl::OkStatus();
}

absl::StatusOr<int> SqliteStore::SchemaVersion() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("PRAGMA user_version"));
  if (sqlite3_step(s->get()) != SQLITE_ROW) return SqlError("reading the schema version");
  const int version = sqlite3_column_int(s->get(), 0);
  s->Reset();
  return version;
}

absl::StatusOr<int64_t> SqliteStore::SweepIdLocked(const std::string& sweep) {
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT sweep_id FROM sweeps WHERE name = ?1"));
  s->Bind(1, sweep);
  const int rc = sqlite3_step(s->get());
  if (rc == SQLITE_ROW) {
    const int64_t id = sqlite3_column_int64(s->get(), 0);
    s->Reset();
    return id;
  }
  s->Reset();
  if (rc != SQLITE_DONE) return SqlError("looking up a sweep");
  return absl::NotFoundError(absl::StrCat("no sweep named '", sweep, "'"));
}

absl::Status SqliteStore::NoteSweepChangedLocked(int64_t sweep_id) {
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("INSERT INTO sweep_versions (sweep_id, data_version) "
                                 "VALUES (?1, 1) ON CONFLICT (sweep_id) DO UPDATE SET "
                                 "data_version = data_version + 1"));
  s->Bind(1, sweep_id);
  return WriteLocked(s, "raising the sweep's data version");
}

absl::Status SqliteStore::NoteJobChangedLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("INSERT INTO sweep_versions (sweep_id, data_version) "
                                 "SELECT sweep_id, 1 FROM sweep_jobs WHERE job_id = ?1 "
                                 "ON CONFLICT (sweep_id) DO UPDATE SET "
                                 "data_version = data_version + 1"));
  s->Bind(1, job_id);
  return WriteLocked(s, "raising the data version of the job's sweeps");
}

absl::Status SqliteStore::SummarizeMetricsLocked(const std::string& job_id, int64_t highest,
                                                 bool evaluated) {
  ASSIGN_OR_RETURN(Statement * step,
                   PrepareLocked("INSERT INTO job_metric_summary (job_id, last_step) "
                                 "VALUES (?1, ?2) ON CONFLICT (job_id) DO UPDATE SET last_step = "
                                 "MAX(IFNULL(last_step, excluded.last_step), excluded.last_step)"));
  step->Bind(1, job_id).Bind(2, highest);
  RETURN_IF_ERROR(WriteLocked(step, "raising the job's last metric step"));
  if (!evaluated) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      Statement * finals,
      PrepareLocked("UPDATE job_metric_summary SET (final_val_loss, best_val_loss, "
                    "final_val_loss_causal, final_val_loss_se, final_val_loss_causal_se, "
                    "final_capacity, final_capacity_causal, final_flops_ratio_causal) = "
                    "(SELECT final_val_loss, best_val_loss, final_val_loss_causal, "
                    "final_val_loss_se, final_val_loss_causal_se, final_capacity, "
                    "final_capacity_causal, final_flops_ratio_causal FROM job_metric_finals "
                    "WHERE job_id = ?1) WHERE job_id = ?1"));
  finals->Bind(1, job_id);
  return WriteLocked(finals, "copying the job's final evaluation");
}

absl::Status SqliteStore::ResummarizeMetricsLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("INSERT OR REPLACE INTO job_metric_summary "
                                 "SELECT * FROM job_metric_rollup WHERE job_id = ?1"));
  s->Bind(1, job_id);
  return WriteLocked(s, "summarizing the job's metrics again");
}

absl::StatusOr<int64_t> SqliteStore::WriteSweepRowLocked(const SweepSpec& spec, double now,
                                                         bool* created, bool* changed) {
  *created = *changed = false;
  auto existing = SweepIdLocked(spec.name);
  if (existing.ok()) {
    ASSIGN_OR_RETURN(Statement * update,
                     PrepareLocked("UPDATE sweeps SET spec_yaml = ?2, source = ?3, "
                                   "updated_at = ?4 WHERE sweep_id = ?1 AND spec_yaml <> ?2"));
    update->Bind(1, *existing).Bind(2, spec.yaml_text).Bind(3, spec.source).Bind(4, now);
    RETURN_IF_ERROR(WriteLocked(update, "updating the sweep"));
    *changed = sqlite3_changes(db_) > 0;
    return *existing;
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  ASSIGN_OR_RETURN(Statement * insert,
                   PrepareLocked("INSERT INTO sweeps (name, spec_yaml, source, created_at, "
                                 "updated_at) VALUES (?1, ?2, ?3, ?4, ?4)"));
  insert->Bind(1, spec.name).Bind(2, spec.yaml_text).Bind(3, spec.source).Bind(4, now);
  RETURN_IF_ERROR(WriteLocked(insert, "inserting the sweep"));
  *created = true;
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

absl::StatusOr<SubmitResult> SqliteStore::SubmitSweep(const SweepSpec& spec,
                                                      const std::vector<ResolvedJob>& jobs) {
  SubmitResult result;
  result.jobs_in_spec = static_cast<int64_t>(jobs.size());
  const double now = Now();
  absl::Status status = Write([&]() -> absl::Status {
    bool spec_changed = false;
    ASSIGN_OR_RETURN(const int64_t sweep_id,
                     WriteSweepRowLocked(spec, now, &result.sweep_created, &spec_changed));
    ASSIGN_OR_RETURN(
        Statement * insert_job,
        PrepareLocked(
            "INSERT INTO jobs (job_id, family, scale, sparsity, capacity, stride, context, "
            "n_layers, dense_layers, d_model, n_heads, d_ff, vocab_size, n_params_total, "
            "n_params_active, flops_per_token, dense_flops_per_token, budget_kind, "
            "budget_value, tokens, steps, train_flops, batch_tokens, ranks, priority, "
            "max_attempts, config_json, created_at, updated_at, role, parent_id, start_step) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
            "?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?28, ?29, ?30, ?31) "
            "ON CONFLICT (job_id) DO NOTHING"));
    ASSIGN_OR_RETURN(Statement * link,
                     PrepareLocked("INSERT INTO sweep_jobs (sweep_id, job_id) VALUES (?1, ?2) "
                                   "ON CONFLICT DO NOTHING"));
    for (const ResolvedJob& job : jobs) {
      const ModelShape& s = job.file.shape;
      insert_job->Bind(1, job.file.id)
          .Bind(2, FamilyName(s.family))
          .Bind(3, job.scale)
          .Bind(4, job.sparsity)
          .Bind(5, s.capacity)
          .Bind(6, s.stride)
          .Bind(7, s.context)
          .Bind(8, s.n_layers)
          .Bind(9, job.dense_layers)
          .Bind(10, s.d_model)
          .Bind(11, s.n_heads)
          .Bind(12, s.d_ff)
          .Bind(13, s.vocab_size)
          .Bind(14, job.n_params_total)
          .Bind(15, job.n_params_active)
          .Bind(16, job.file.flops_per_token)
          .Bind(17, job.dense_flops_per_token)
          .Bind(18, BudgetKindName(job.budget_kind))
          .Bind(19, job.budget_value)
          .Bind(20, job.file.tokens)
          .Bind(21, job.file.steps)
          .Bind(22, job.train_flops)
          .Bind(23, job.file.batch_tokens)
          .Bind(24, job.ranks)
          .Bind(25, job.priority)
          .Bind(26, job.max_attempts)
          .Bind(27, job.ToJson().dump())
          .Bind(28, now)
          .Bind(29, job.role())
          .Bind(31, job.file.start_step);
      if (job.file.parent.empty()) {
        insert_job->BindNull(30);
      } else {
        insert_job->Bind(30, job.file.parent);
      }
      RETURN_IF_ERROR(WriteLocked(insert_job, absl::StrCat("inserting job ", job.file.id)));
      const bool inserted = sqlite3_changes(db_) > 0;
      link->Bind(1, sweep_id).Bind(2, job.file.id);
      RETURN_IF_ERROR(WriteLocked(link, absl::StrCat("linking job ", job.file.id)));
      if (inserted) {
        ++result.new_jobs;
      } else if (sqlite3_changes(db_) > 0) {
        ++result.linked_jobs;
      }
    }
    // An unchanged resubmission writes nothing: the data version (the dashboard's
    // ETag) stays, and the transaction commits no page.
    if (!result.sweep_created && !spec_changed && result.new_jobs == 0 && result.linked_jobs == 0) {
      return absl::OkStatus();
    }
    return NoteSweepChangedLocked(sweep_id);
  });
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("submitting sweep '", spec.name, "': ", status.message()));
  }
  return result;
}

absl::StatusOr<QueryResult> SqliteStore::CollectLocked(Statement* statement) {
  sqlite3_stmt* s = statement->get();
  QueryResult result;
  const int n = sqlite3_column_count(s);
  for (int i = 0; i < n; ++i) result.columns.emplace_back(sqlite3_column_name(s, i));
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    std::vector<Value> row;
    row.reserve(n);
    for (int i = 0; i < n; ++i) {
      switch (sqlite3_column_type(s, i)) {
        case SQLITE_INTEGER:
          row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(s, i)));
          break;
        case SQLITE_FLOAT:
          row.emplace_back(sqlite3_column_double(s, i));
          break;
        case SQLITE_NULL:
          row.emplace_back(std::monostate{});
          break;
        default:
          row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, i)),
                                       sqlite3_column_bytes(s, i)));
      }
    }
    result.rows.push_back(std::move(row));
  }
  statement->Reset();
  if (rc != SQLITE_DONE) return SqlError("reading rows");
  return result;
}

absl::Status SqliteStore::EachRowLocked(Statement* statement,
                                        const std::function<absl::Status(const Row&)>& each) {
  sqlite3_stmt* s = statement->get();
  const Row row(s);
  absl::Status status;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    status = each(row);
    if (!status.ok()) break;
  }
  if (status.ok() && rc != SQLITE_DONE) status = SqlError("reading rows");
  statement->Reset();
  return status;
}

absl::StatusOr<std::vector<StateCounts>> SqliteStore::CountStates(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sweep.empty()) RETURN_IF_ERROR(SweepIdLocked(sweep).status());
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT s.name, j.status, COUNT(*) FROM sweeps s "
                                 "LEFT JOIN sweep_jobs sj ON sj.sweep_id = s.sweep_id "
                                 "LEFT JOIN jobs j ON j.job_id = sj.job_id "
                                 "WHERE ?1 = '' OR s.name = ?1 "
                                 "GROUP BY s.name, j.status ORDER BY s.name"));
  s->Bind(1, sweep);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  std::vector<StateCounts> out;
  for (const auto& row : rows.rows) {
    const std::string& name = AsText(row[0]);
    if (out.empty() || out.back().sweep != name) {
      out.emplace_back();
      out.back().sweep = name;
      for (JobState st : kAllJobStates) out.back().counts[st] = 0;
    }
    if (std::holds_alternative<std::monostate>(row[1])) continue;  // a sweep without jobs
    ASSIGN_OR_RETURN(JobState state, ParseJobState(AsText(row[1])));
    out.back().counts[state] += AsInt(row[2]);
    out.back().total += AsInt(row[2]);
  }
  return out;
}

absl::StatusOr<int64_t> SqliteStore::RecordFit(const std::string& sweep, const FitRecord& fit) {
  int64_t fit_id = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
    ASSIGN_OR_RETURN(Statement * s,
                     PrepareLocked("INSERT INTO fits (sweep_id, law, points_hash, n_points, "
                                   "params_json, objective, rmse, result_json, created_at, "
                                   "method, holdout_scale) "
                                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"));
    s->Bind(1, sweep_id).Bind(2, fit.law).Bind(3, fit.points_hash).Bind(4, fit.n_points);
    s->Bind(5, fit.params_json).Bind(6, fit.objective).Bind(7, fit.rmse);
    s->Bind(8, fit.result_json).Bind(9, Now()).Bind(10, fit.method);
    if (fit.holdout_scale.empty()) {
      s->BindNull(11);
    } else {
      s->Bind(11, fit.holdout_scale);
    }
    RETURN_IF_ERROR(WriteLocked(s, "recording a fit"));
    fit_id = sqlite3_last_insert_rowid(db_);
    return NoteSweepChangedLocked(sweep_id);
  }));
  return fit_id;
}

absl::StatusOr<JobState> SqliteStore::GetJobState(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT status FROM jobs WHERE job_id = ?1"));
  s->Bind(1, job_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  if (rows.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return ParseJobState(AsText(Cell(rows, 0, 0)));
}

absl::StatusOr<int64_t> SqliteStore::MoveJobsLocked(const std::vector<std::string>& job_ids,
                                                    const std::vector<JobState>& from, JobState to,
                                                    const std::string& reason) {
  ASSIGN_OR_RETURN(Statement * read, PrepareLocked("SELECT status FROM jobs WHERE job_id = ?1"));
  ASSIGN_OR_RETURN(Statement * update,
                   PrepareLocked("UPDATE jobs SET status = ?2, status_reason = ?3, "
                                 "updated_at = ?4 WHERE job_id = ?1 AND status = ?5"));
  // A resumed job gets a fresh attempt budget; a cancelled one gives up its lease.
  ASSIGN_OR_RETURN(Statement * reset,
                   PrepareLocked("UPDATE jobs SET failures = 0 WHERE job_id = ?1"));
  ASSIGN_OR_RETURN(Statement * close,
                   PrepareLocked("UPDATE attempts SET status = 'cancelled', ended_at = ?2, "
                                 "reason = ?3 WHERE job_id = ?1 AND ended_at IS NULL"));
  ASSIGN_OR_RETURN(Statement * unlease,
                   PrepareLocked("UPDATE jobs SET worker_id = NULL, lease_expires_at = NULL "
                                 "WHERE job_id = ?1"));
  int64_t moved = 0;
  for (const std::string& id : job_ids) {
    read->Bind(1, id);
    ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(read));
    if (rows.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
    ASSIGN_OR_RETURN(JobState current, ParseJobState(AsText(Cell(rows, 0, 0))));
    if (std::find(from.begin(), from.end(), current) == from.end()) continue;
    if (!IsLegalTransition(current, to)) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, ": illegal transition ",
                                                        std::string(JobStateName(current)), " -> ",
                                                        std::string(JobStateName(to))));
    }
    update->Bind(1, id)
        .Bind(2, JobStateName(to))
        .Bind(3, reason)
        .Bind(4, Now())
        .Bind(5, JobStateName(current));
    RETURN_IF_ERROR(WriteLocked(update, absl::StrCat("moving job ", id)));
    if (ResetsFailures(to)) {
      reset->Bind(1, id);
      RETURN_IF_ERROR(WriteLocked(reset, "resetting failures"));
    }
    if (ClosesAttempt(current, to)) {
      close->Bind(1, id).Bind(2, Now()).Bind(3, reason);
      RETURN_IF_ERROR(WriteLocked(close, "closing the attempt"));
      unlease->Bind(1, id);
      RETURN_IF_ERROR(WriteLocked(unlease, "releasing the lease"));
    }
    RETURN_IF_ERROR(NoteJobChangedLocked(id));
    ++moved;
  }
  return moved;
}

absl::Status SqliteStore::TransitionJob(const std::string& job_id, JobState to,
                                        const std::string& reason) {
  return Write([&]() -> absl::Status {
    const std::vector<JobState> any(kAllJobStates.begin(), kAllJobStates.end());
    return MoveJobsLocked({job_id}, any, to, reason).status();
  });
}

absl::StatusOr<std::vector<std::string>> SqliteStore::SweepOrJobLocked(
    const std::string& sweep_or_job) {
  auto sweep_id = SweepIdLocked(sweep_or_job);
  if (absl::IsNotFound(sweep_id.status())) return std::vector<std::string>{sweep_or_job};
  RETURN_IF_ERROR(sweep_id.status());
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT job_id FROM sweep_jobs WHERE sweep_id = ?1"));
  s->Bind(1, *sweep_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  std::vector<std::string> ids;
  for (const auto& row : rows.rows) ids.push_back(AsText(row[0]));
  return ids;
}

absl::StatusOr<int64_t> SqliteStore::ResumeSweep(const std::string& sweep_or_job) {
  int64_t moved = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::vector<std::string> ids, SweepOrJobLocked(sweep_or_job));
    auto result = MoveJobsLocked(ids, StatesWhere(IsResumable), JobState::kPending, "resumed");
    if (absl::IsNotFound(result.status())) {
      return absl::NotFoundError(absl::StrCat("no sweep or job named '", sweep_or_job, "'"));
    }
    ASSIGN_OR_RETURN(moved, std::move(result));
    return absl::OkStatus();
  }));
  return moved;
}

namespace {

absl::Status CheckTag(const std::string& tag) {
  if (tag.empty() || tag.size() > 64 || tag.find_first_of(", \t\n\r") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("tag '", tag, "': give 1-64 bytes without commas or white space"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SqliteStore::SweepLabels> SqliteStore::SweepTags(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  return SweepTagsLocked(sweep);
}

absl::StatusOr<SqliteStore::SweepLabels> SqliteStore::SweepTagsLocked(const std::string& sweep) {
  ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
  SweepLabels labels;
  ASSIGN_OR_RETURN(Statement * tags,
                   PrepareLocked("SELECT tag FROM sweep_tags WHERE sweep_id = ?1 ORDER BY tag"));
  tags->Bind(1, sweep_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(tags));
  for (const auto& row : rows.rows) labels.tags.push_back(AsText(row[0]));
  ASSIGN_OR_RETURN(Statement * note,
                   PrepareLocked("SELECT COALESCE(note, '') FROM sweeps WHERE sweep_id = ?1"));
  note->Bind(1, sweep_id);
  ASSIGN_OR_RETURN(QueryResult notes, CollectLocked(note));
  if (!notes.rows.empty()) labels.note = AsText(notes.rows[0][0]);
  return labels;
}

absl::StatusOr<SqliteStore::SweepLabels> SqliteStore::SetSweepTags(
    const std::string& sweep, const std::vector<std::string>& add,
    const std::vector<std::string>& remove, const std::optional<std::string>& note) {
  for (const std::string& tag : add) RETURN_IF_ERROR(CheckTag(tag));
  SweepLabels labels;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
    ASSIGN_OR_RETURN(Statement * insert,
                     PrepareLocked("INSERT OR IGNORE INTO sweep_tags (sweep_id, tag) "
                                   "VALUES (?1, ?2)"));
    for (const std::string& tag : add) {
      insert->Bind(1, sweep_id);
      insert->Bind(2, tag);
      RETURN_IF_ERROR(WriteLocked(insert, "adding a tag"));
    }
    ASSIGN_OR_RETURN(Statement * erase,
                     PrepareLocked("DELETE FROM sweep_tags WHERE sweep_id = ?1 AND tag = ?2"));
    for (const std::string& tag : remove) {
      erase->Bind(1, sweep_id);
      erase->Bind(2, tag);
      RETURN_IF_ERROR(WriteLocked(erase, "removing a tag"));
    }
    if (note.has_value()) {
      ASSIGN_OR_RETURN(
          Statement * set,
          PrepareLocked("UPDATE sweeps SET note = NULLIF(?2, '') WHERE sweep_id = ?1"));
      set->Bind(1, sweep_id);
      set->Bind(2, *note);
      RETURN_IF_ERROR(WriteLocked(set, "setting the note"));
    }
    ASSIGN_OR_RETURN(labels, SweepTagsLocked(sweep));
    return absl::OkStatus();
  }));
  return labels;
}

absl::StatusOr<int64_t> SqliteStore::Cancel(const std::string& sweep_or_job) {
  int64_t moved = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(const std::vector<std::string> ids, SweepOrJobLocked(sweep_or_job));
    auto result =
        MoveJobsLocked(ids, StatesWhere(IsCancellable), JobState::kCancelled, "cancelled");
    if (absl::IsNotFound(result.status())) {
      return absl::NotFoundError(absl::StrCat("no sweep or job named '", sweep_or_job, "'"));
    }
    ASSIGN_OR_RETURN(moved, std::move(result));
    for (const std::string& id : ids) RETURN_IF_ERROR(CancelStrandedBranchesLocked(id, Now()));
    return absl::OkStatus();
  }));
  return moved;
}

absl::StatusOr<int64_t> SqliteStore::SetOrderKeys(
    const std::vector<std::pair<std::string, std::optional<double>>>& keys) {
  int64_t changed = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Statement * set, PrepareLocked("UPDATE jobs SET order_key = ?2 "
                                                    "WHERE job_id = ?1 AND status = 'pending'"));
    for (const auto& [job_id, key] : keys) {
      set->Bind(1, job_id);
      if (key.has_value() && std::isfinite(*key)) {
        set->Bind(2, *key);
      } else {
        set->BindNull(2);
      }
      RETURN_IF_ERROR(WriteLocked(set, "setting the order key"));
      changed += sqlite3_changes(db_);
    }
    return absl::OkStatus();
  }));
  return changed;
}

absl::StatusOr<QueryResult> SqliteStore::Query(const std::string& sql) {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, &tail) != SQLITE_OK) {
    return absl::InvalidArgumentError(absl::StrCat("SQL error: ", sqlite3_errmsg(db_)));
  }
  Statement statement(raw);
  if (raw == nullptr) return absl::InvalidArgumentError("empty SQL statement");
  if (tail != nullptr &&
      std::string_view(tail).find_first_not_of(" \t\r\n;") != std::string_view::npos) {
    return absl::InvalidArgumentError("give one SQL statement at a time");
  }
  if (!sqlite3_stmt_readonly(raw)) {
    return absl::InvalidArgumentError(
        "the statement would write; the database is opened read-only for queries");
  }
  return CollectLocked(&statement);
}

// ---- Leases ---------------------------------------------------------------------

absl::Status SqliteStore::UpsertWorker(const std::string& worker_id, const std::string& host,
                                       int64_t ranks, double now, const std::string& build) {
  return Write([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Statement * s,
                     PrepareLocked("INSERT INTO workers (worker_id, host, ranks, registered_at, "
                                   "last_seen, build) VALUES (?1, ?2, ?3, ?4, ?4, ?5) ON CONFLICT "
                                   "(worker_id) DO UPDATE SET last_seen = excluded.last_seen"));
    s->Bind(1, worker_id).Bind(2, host).Bind(3, ranks).Bind(4, now);
    if (build.empty()) {
      s->BindNull(5);
    } else {
      s->Bind(5, build);
    }
    return WriteLocked(s, "registering a worker");
  });
}

absl::StatusOr<int64_t> SqliteStore::WorkerRanks(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT ranks FROM workers WHERE worker_id = ?1"));
  s->Bind(1, worker_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  if (rows.rows.empty()) {
    return absl::NotFoundError(absl::StrCat("unknown worker '", worker_id, "'; register first"));
  }
  return AsInt(Cell(rows, 0, 0));
}

absl::StatusOr<std::optional<LeaseGrant>> SqliteStore::LeaseNextJob(const std::string& worker_id,
                                                                    int64_t group_ranks, double now,
                                                                    double ttl,
                                                                    const std::string& request_id) {
  std::optional<LeaseGrant> grant;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    if (!request_id.empty()) {
      ASSIGN_OR_RETURN(grant, ReplayLeaseLocked(worker_id, request_id));
      if (grant.has_value()) return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::string job_id, PickJobLocked(group_ranks));
    if (job_id.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(grant, GrantLeaseLocked(job_id, worker_id, now, ttl, request_id));
    return absl::OkStatus();
  }));
  return grant;
}

absl::StatusOr<std::optional<LeaseGrant>> SqliteStore::ReplayLeaseLocked(
    const std::string& worker_id, const std::string& request_id) {
  // The same request again (its answer was lost: the coordinator stopped after
  // committing, or the call timed out): the lease it made, as it was, while no
  // heartbeat has confirmed it. It is not extended, so a group that keeps asking
  // cannot hold it past its TTL.
  ASSIGN_OR_RETURN(Statement * again,
                   // From the few leased jobs (jobs_by_status), then the attempt by key.
                   PrepareLocked("SELECT j.job_id, j.config_json, j.attempt, j.fencing_token, "
                                 "a.resumed_from_step FROM jobs j JOIN attempts a "
                                 "ON a.job_id = j.job_id AND a.attempt = j.attempt "
                                 "WHERE j.status = 'leased' AND j.worker_id = ?2 "
                                 "AND a.lease_request = ?1"));
  again->Bind(1, request_id).Bind(2, worker_id);
  ASSIGN_OR_RETURN(QueryResult lost, CollectLocked(again));
  if (lost.rows.empty()) return std::nullopt;
  LeaseGrant g;
  g.job_id = AsText(Cell(lost, 0, 0));
  g.config_json = AsText(Cell(lost, 0, 1));
  g.attempt = AsInt(Cell(lost, 0, 2));
  g.fencing_token = AsInt(Cell(lost, 0, 3));
  g.resume_step = AsInt(Cell(lost, 0, 4));
  if (g.resume_step > 0) RETURN_IF_ERROR(FindResumePointLocked(g.resume_step, &g));
  return g;
}

absl::StatusOr<std::string> SqliteStore::PickJobLocked(int64_t group_ranks) {
  // Candidates in lease order, a page at a time, until one fits the group.
  static const std::string kPageSql = absl::StrCat(
      "SELECT job_id, batch_tokens, context FROM jobs WHERE status = 'pending' "
      // A branch waits until its trunk's checkpoint at its start is recorded.
      "AND (parent_id IS NULL OR EXISTS (SELECT 1 FROM checkpoints c WHERE "
      "c.job_id = jobs.parent_id AND c.step = jobs.start_step)) "
      "ORDER BY ",
      std::string(kLeaseOrderSql), " LIMIT ?1 OFFSET ?2");
  ASSIGN_OR_RETURN(Statement * page, PrepareLocked(kPageSql));
  // The first candidate almost always fits: a page of one, then pages of 64.
  for (int64_t offset = 0, size = 1;; offset += size, size = 64) {
    page->Bind(1, size).Bind(2, offset);
    ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(page));
    for (const auto& row : rows.rows) {
      if (BatchSplitsOver(AsInt(row[1]), AsInt(row[2]), group_ranks)) return AsText(row[0]);
    }
    if (static_cast<int64_t>(rows.rows.size()) < size) return std::string();
  }
}

absl::StatusOr<LeaseGrant> SqliteStore::GrantLeaseLocked(const std::string& job_id,
                                                         const std::string& worker_id, double now,
                                                         double ttl,
                                                         const std::string& request_id) {
  LeaseGrant g;
  g.job_id = job_id;
  ASSIGN_OR_RETURN(Statement * pick,
                   PrepareLocked("SELECT config_json, attempt FROM jobs WHERE job_id = ?1"));
  pick->Bind(1, g.job_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(pick));
  g.config_json = AsText(Cell(rows, 0, 0));
  g.attempt = AsInt(Cell(rows, 0, 1)) + 1;

  ASSIGN_OR_RETURN(Statement * bump, PrepareLocked("UPDATE counters SET value = value + 1 "
                                                   "WHERE name = 'fencing_token' RETURNING value"));
  RETURN_IF_ERROR(FaultLocked("fencing token"));
  ASSIGN_OR_RETURN(QueryResult token, CollectLocked(bump));
  g.fencing_token = AsInt(Cell(token, 0, 0));

  RETURN_IF_ERROR(FindResumePointLocked(/*step=*/-1, &g));
  // The latest attempt wins: rows past the resume point are redone by this one.
  ASSIGN_OR_RETURN(Statement * trim,
                   PrepareLocked("DELETE FROM metrics WHERE job_id = ?1 AND step > ?2"));
  trim->Bind(1, g.job_id).Bind(2, g.resume_step);
  RETURN_IF_ERROR(WriteLocked(trim, "trimming metrics"));
  if (sqlite3_changes(db_) > 0) RETURN_IF_ERROR(ResummarizeMetricsLocked(g.job_id));

  if (!IsLegalTransition(JobState::kPending, JobState::kLeased)) {
    return absl::InternalError("state machine forbids leasing");
  }
  ASSIGN_OR_RETURN(Statement * lease,
                   PrepareLocked("UPDATE jobs SET status = 'leased', attempt = ?2, "
                                 "fencing_token = ?3, worker_id = ?4, lease_expires_at = ?5, "
                                 "last_step = ?6, status_reason = NULL, updated_at = ?7 "
                                 "WHERE job_id = ?1 AND status = 'pending'"));
  lease->Bind(1, g.job_id)
      .Bind(2, g.attempt)
      .Bind(3, g.fencing_token)
      .Bind(4, worker_id)
      .Bind(5, now + ttl)
      .Bind(6, g.resume_step)
      .Bind(7, now);
  RETURN_IF_ERROR(WriteLocked(lease, "leasing a job"));
  ASSIGN_OR_RETURN(Statement * attempt,
                   PrepareLocked("INSERT INTO attempts (job_id, attempt, worker_id, "
                                 "fencing_token, status, resumed_from_step, started_at, "
                                 "lease_request, host, build) VALUES (?1, ?2, ?3, ?4, 'leased', "
                                 "?5, ?6, ?7, (SELECT host FROM workers WHERE worker_id = ?3), "
                                 "(SELECT build FROM workers WHERE worker_id = ?3))"));
  attempt->Bind(1, g.job_id)
      .Bind(2, g.attempt)
      .Bind(3, worker_id)
      .Bind(4, g.fencing_token)
      .Bind(5, g.resume_step)
      .Bind(6, now);
  if (request_id.empty()) {
    attempt->BindNull(7);
  } else {
    attempt->Bind(7, request_id);
  }
  RETURN_IF_ERROR(WriteLocked(attempt, "recording the attempt"));
  RETURN_IF_ERROR(NoteJobChangedLocked(g.job_id));
  return g;
}

absl::StatusOr<JobState> SqliteStore::CheckFenceLocked(const std::string& job_id, int64_t token,
                                                       bool allow_cancelled,
                                                       const std::string* holder,
                                                       AttemptSteps* attempt) {
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT j.status, j.fencing_token, IFNULL(j.worker_id, ''), "
                                 "j.steps, j.last_step, IFNULL(a.resumed_from_step, 0) "
                                 "FROM jobs j LEFT JOIN attempts a ON a.job_id = j.job_id AND "
                                 "a.fencing_token = j.fencing_token WHERE j.job_id = ?1"));
  s->Bind(1, job_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  if (rows.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  ASSIGN_OR_RETURN(JobState state, ParseJobState(AsText(Cell(rows, 0, 0))));
  const int64_t current = AsInt(Cell(rows, 0, 1));
  if (token != current) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, ": fencing token ", token,
                                                      " is stale (current ", current, ")"));
  }
  const bool held = IsHeld(state);
  if (!held && !(allow_cancelled && state == JobState::kCancelled)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ",
                                                      std::string(JobStateName(state)),
                                                      ", no longer held by this lease"));
  }
  // The token names the attempt; the worker id must be the one it was granted to
  // (a token copied to another worker, or a client bug, is refused).
  const std::string& granted = AsText(Cell(rows, 0, 2));
  if (holder != nullptr && held && granted != *holder) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is leased to worker '", granted, "', not '", *holder, "'"));
  }
  if (attempt != nullptr) {
    attempt->steps = AsInt(Cell(rows, 0, 3));
    attempt->last_reported = AsInt(Cell(rows, 0, 4));
    attempt->resumed_from = AsInt(Cell(rows, 0, 5));
  }
  return state;
}

absl::StatusOr<JobState> SqliteStore::RenewLease(const std::string& job_id,
                                                 const std::string& worker_id, int64_t token,
                                                 int64_t step, double now, double ttl) {
  JobState state = JobState::kPending;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    AttemptSteps attempt;
    ASSIGN_OR_RETURN(
        state, CheckFenceLocked(job_id, token, /*allow_cancelled=*/true, &worker_id, &attempt));
    if (state == JobState::kCancelled) return absl::OkStatus();
    RETURN_IF_ERROR(CheckReportedStep("Heartbeat", StepReport::kHeartbeat, step, attempt));
    ASSIGN_OR_RETURN(Statement * s,
                     PrepareLocked("UPDATE jobs SET status = 'running', lease_expires_at = ?2, "
                                   "last_step = MAX(last_step, ?3), updated_at = ?4 "
                                   "WHERE job_id = ?1"));
    s->Bind(1, job_id).Bind(2, now + ttl).Bind(3, step).Bind(4, now);
    RETURN_IF_ERROR(WriteLocked(s, "renewing a lease"));
    if (state == JobState::kLeased) {
      ASSIGN_OR_RETURN(Statement * a, PrepareLocked("UPDATE attempts SET status = 'running' "
                                                    "WHERE job_id = ?1 AND fencing_token = ?2"));
      a->Bind(1, job_id).Bind(2, token);
      RETURN_IF_ERROR(WriteLocked(a, "marking the attempt running"));
      state = JobState::kRunning;
    }
    return NoteJobChangedLocked(job_id);
  }));
  return state;
}

absl::Status SqliteStore::AppendFencedMetrics(const std::string& job_id, int64_t token,
                                              const std::vector<MetricPoint>& points,
                                              double wall_time) {
  return Write([&]() -> absl::Status {
    AttemptSteps steps;
    RETURN_IF_ERROR(
        CheckFenceLocked(job_id, token, /*allow_cancelled=*/false, nullptr, &steps).status());
    for (const MetricPoint& p : points) {
      if (CheckReportedStep("", StepReport::kMetric, p.step, steps).ok()) continue;
      return CheckReportedStep(absl::StrCat("ReportMetrics: metric '", p.name, "'"),
                               StepReport::kMetric, p.step, steps);
    }
    ASSIGN_OR_RETURN(Statement * attempt_of,
                     PrepareLocked("SELECT attempt FROM jobs WHERE job_id = ?1"));
    attempt_of->Bind(1, job_id);
    ASSIGN_OR_RETURN(QueryResult a, CollectLocked(attempt_of));
    const int64_t attempt = AsInt(Cell(a, 0, 0));
    ASSIGN_OR_RETURN(Statement * last,
                     PrepareLocked("SELECT MAX(step) FROM metrics WHERE job_id = ?1 AND "
                                   "name = ?2 AND attempt = ?3"));
    ASSIGN_OR_RETURN(Statement * stored,
                     PrepareLocked("SELECT value FROM metrics WHERE job_id = ?1 AND name = ?2 AND "
                                   "step = ?3 AND attempt = ?4"));
    // A row this attempt already stored may be sent again (a reply was lost), but
    // only with the same value: the client was told that value is in the database.
    const auto same_as_stored = [&](const MetricPoint& p, const QueryResult& found) {
      const Value& v = Cell(found, 0, 0);
      const double was = std::holds_alternative<double>(v) ? AsReal(v) : NAN;
      if (was == p.value) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("job ", job_id, ": metric '", p.name, "' step ", p.step, " is stored as ",
                       was, "; a re-send must carry the same value, not ", p.value));
    };
    std::map<std::string, int64_t> floor;
    std::vector<bool> resent(points.size(), false);
    for (size_t i = 0; i < points.size(); ++i) {
      const MetricPoint& p = points[i];
      auto it = floor.find(p.name);
      if (it == floor.end()) {
        last->Bind(1, job_id).Bind(2, p.name).Bind(3, attempt);
        ASSIGN_OR_RETURN(QueryResult m, CollectLocked(last));
        const Value& v = Cell(m, 0, 0);
        it = floor.emplace(p.name, std::holds_alternative<int64_t>(v) ? AsInt(v) : -1).first;
      }
      if (p.step <= it->second) {
        // A batch sent again after a lost reply is already stored: skip it (with
        // the same values). Any other step below what this attempt stored is out of
        // order; the same step twice within one batch is kept as before.
        stored->Bind(1, job_id).Bind(2, p.name).Bind(3, p.step).Bind(4, attempt);
        ASSIGN_OR_RETURN(QueryResult found, CollectLocked(stored));
        if (!found.rows.empty()) {
          RETURN_IF_ERROR(same_as_stored(p, found));
          resent[i] = true;
          continue;
        }
        if (p.step < it->second) {
          return absl::InvalidArgumentError(absl::StrCat("job ", job_id, ": metric '", p.name,
                                                         "' step ", p.step, " goes back from ",
                                                         it->second));
        }
      }
      it->second = p.step;
    }
    ASSIGN_OR_RETURN(
        Statement * insert,
        PrepareLocked("INSERT INTO metrics (job_id, name, step, value, tokens, flops, attempt, "
                      "wall_time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
                      "ON CONFLICT (job_id, name, step) DO UPDATE SET value = excluded.value, "
                      "tokens = excluded.tokens, flops = excluded.flops, "
                      "attempt = excluded.attempt, wall_time = excluded.wall_time"));
    int64_t highest = -1;
    bool evaluated = false;
    for (size_t i = 0; i < points.size(); ++i) {
      if (resent[i]) continue;
      const MetricPoint& p = points[i];
      highest = std::max(highest, p.step);
      evaluated |= p.name.rfind("val_", 0) == 0;
      insert->Bind(1, job_id)
          .Bind(2, p.name)
          .Bind(3, p.step)
          .Bind(4, p.value)
          .Bind(5, p.tokens)
          .Bind(6, p.flops)
          .Bind(7, attempt)
          .Bind(8, wall_time);
      RETURN_IF_ERROR(WriteLocked(insert, "inserting a metric"));
    }
    if (highest >= 0) RETURN_IF_ERROR(SummarizeMetricsLocked(job_id, highest, evaluated));
    return NoteJobChangedLocked(job_id);
  });
}

absl::Status SqliteStore::RecordCheckpoint(const std::string& job_id, int64_t token, int64_t step,
                                           const std::string& path, const std::string& checksum,
                                           double now) {
  return Write([&]() -> absl::Status {
    AttemptSteps attempt;
    RETURN_IF_ERROR(
        CheckFenceLocked(job_id, token, /*allow_cancelled=*/false, nullptr, &attempt).status());
    ASSIGN_OR_RETURN(Statement * last,
                     PrepareLocked("SELECT IFNULL(MAX(c.step), 0) FROM checkpoints c JOIN jobs j "
                                   "ON j.job_id = c.job_id AND c.attempt = j.attempt "
                                   "WHERE c.job_id = ?1"));
    last->Bind(1, job_id);
    ASSIGN_OR_RETURN(QueryResult newest, CollectLocked(last));
    attempt.last_checkpoint = AsInt(Cell(newest, 0, 0));
    RETURN_IF_ERROR(CheckReportedStep("ReportCheckpoint", StepReport::kCheckpoint, step, attempt));
    RETURN_IF_ERROR(CheckCheckpointPath(job_id, step, path));
    ASSIGN_OR_RETURN(
        Statement * s,
        PrepareLocked("INSERT INTO checkpoints (job_id, step, attempt, path, "
                      "checksum, created_at) SELECT ?1, ?2, attempt, ?3, ?4, ?5 "
                      "FROM jobs WHERE job_id = ?1 ON CONFLICT (job_id, step) DO "
                      "UPDATE SET attempt = excluded.attempt, path = excluded.path, "
                      "checksum = excluded.checksum, created_at = excluded.created_at"));
    s->Bind(1, job_id).Bind(2, step).Bind(3, path).Bind(4, checksum).Bind(5, now);
    RETURN_IF_ERROR(WriteLocked(s, "recording a checkpoint"));
    return NoteJobChangedLocked(job_id);
  });
}

absl::Status SqliteStore::EndAttemptLocked(const std::string& job_id, JobState from, AttemptEnd end,
                                           const std::string& reason, double now, JobState* to) {
  ASSIGN_OR_RETURN(Statement * read,
                   PrepareLocked("SELECT failures, max_attempts, fencing_token FROM jobs "
                                 "WHERE job_id = ?1"));
  read->Bind(1, job_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(read));
  const int64_t failures = AsInt(Cell(rows, 0, 0));
  const int64_t max_attempts = AsInt(Cell(rows, 0, 1));
  const int64_t token = AsInt(Cell(rows, 0, 2));
  auto verdict = DecideAttemptEnd(from, end, failures, max_attempts);
  if (!verdict.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, ": ", verdict.status().message()));
  }
  *to = verdict->to;
  ASSIGN_OR_RETURN(Statement * update,
                   PrepareLocked("UPDATE jobs SET status = ?2, failures = ?3, worker_id = NULL, "
                                 "lease_expires_at = NULL, status_reason = ?4, updated_at = ?5 "
                                 "WHERE job_id = ?1"));
  update->Bind(1, job_id)
      .Bind(2, JobStateName(*to))
      .Bind(3, verdict->failures)
      .Bind(4, reason)
      .Bind(5, now);
  RETURN_IF_ERROR(WriteLocked(update, "ending an attempt"));
  RETURN_IF_ERROR(NoteJobChangedLocked(job_id));
  if (!IsActive(*to)) RETURN_IF_ERROR(CancelStrandedBranchesLocked(job_id, now));
  ASSIGN_OR_RETURN(Statement * attempt,
                   PrepareLocked("UPDATE attempts SET status = ?3, ended_at = ?4, reason = ?5 "
                                 "WHERE job_id = ?1 AND fencing_token = ?2"));
  attempt->Bind(1, job_id)
      .Bind(2, token)
      .Bind(3, verdict->attempt_status)
      .Bind(4, now)
      .Bind(5, reason);
  return WriteLocked(attempt, "closing the attempt");
}

absl::Status SqliteStore::FindResumePointLocked(int64_t step, LeaseGrant* g) {
  // The job's own checkpoints first (newest first), else a branch's trunk's at its
  // start; then the attempt that wrote it and that attempt's group.
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked("SELECT r.step, r.path, IFNULL(w.ranks, 0) FROM ("
                    "SELECT c.step, c.path, c.job_id, c.attempt, 0 AS trunk FROM checkpoints c "
                    "WHERE c.job_id = ?1 AND (?2 < 0 OR c.step = ?2) "
                    "UNION ALL SELECT c.step, c.path, c.job_id, c.attempt, 1 FROM jobs j "
                    "JOIN checkpoints c ON c.job_id = j.parent_id AND c.step = j.start_step "
                    "WHERE j.job_id = ?1 AND (?2 < 0 OR c.step = ?2) "
                    "ORDER BY trunk, step DESC LIMIT 1) r "
                    "LEFT JOIN attempts a ON a.job_id = r.job_id AND a.attempt = r.attempt "
                    "LEFT JOIN workers w ON w.worker_id = a.worker_id"));
  s->Bind(1, g->job_id).Bind(2, step);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  if (rows.rows.empty()) return absl::OkStatus();
  g->resume_step = AsInt(Cell(rows, 0, 0));
  g->resume_checkpoint = AsText(Cell(rows, 0, 1));
  g->resume_ranks = AsInt(Cell(rows, 0, 2));
  return absl::OkStatus();
}

absl::Status SqliteStore::CancelStrandedBranchesLocked(const std::string& trunk_id, double now) {
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked("UPDATE jobs SET status = 'cancelled', updated_at = ?2, status_reason = "
                    "'its trunk ' || parent_id || ' ended ' || (SELECT p.status FROM jobs p "
                    "WHERE p.job_id = ?1) || ' without a checkpoint at step ' || start_step "
                    "WHERE parent_id = ?1 AND status = 'pending' AND NOT EXISTS (SELECT 1 "
                    "FROM checkpoints c WHERE c.job_id = ?1 AND c.step = jobs.start_step) "
                    "AND (SELECT p.status FROM jobs p WHERE p.job_id = ?1) IN "
                    "('succeeded', 'failed', 'cancelled')"));
  s->Bind(1, trunk_id).Bind(2, now);
  RETURN_IF_ERROR(WriteLocked(s, "cancelling the branches of an ended trunk"));
  // A trunk's branches belong to the sweeps it belongs to (its id is part of
  // their configs, so they were submitted together).
  return sqlite3_changes(db_) > 0 ? NoteJobChangedLocked(trunk_id) : absl::OkStatus();
}

absl::StatusOr<JobState> SqliteStore::EndAttempt(const std::string& job_id, int64_t token,
                                                 AttemptEnd end, int64_t step,
                                                 const std::string& reason, double now) {
  JobState to = JobState::kPending;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    AttemptSteps attempt;
    ASSIGN_OR_RETURN(JobState from,
                     CheckFenceLocked(job_id, token, /*allow_cancelled=*/false, nullptr, &attempt));
    const bool succeeded = end == AttemptEnd::kSucceeded;
    RETURN_IF_ERROR(CheckReportedStep(succeeded ? "CompleteJob" : "FailJob",
                                      succeeded ? StepReport::kComplete : StepReport::kFailure,
                                      step, attempt));
    return EndAttemptLocked(job_id, from, end, reason, now, &to);
  }));
  return to;
}

absl::StatusOr<int64_t> SqliteStore::ExpireLeases(double now, const LeaseTokens& not_counted) {
  int64_t expired = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    static const std::string kSql =
        absl::StrCat("SELECT job_id, status, fencing_token FROM jobs WHERE status IN ",
                     StatesIn(IsHeld), " AND lease_expires_at < ?1");
    ASSIGN_OR_RETURN(Statement * s, PrepareLocked(kSql));
    s->Bind(1, now);
    ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
    for (const auto& row : rows.rows) {
      const std::string job_id = AsText(row[0]);
      ASSIGN_OR_RETURN(JobState from, ParseJobState(AsText(row[1])));
      const auto graced = not_counted.find(job_id);
      const bool lost_by_restart = graced != not_counted.end() && graced->second == AsInt(row[2]);
      JobState to;
      RETURN_IF_ERROR(EndAttemptLocked(
          job_id, from, lost_by_restart ? AttemptEnd::kPreempted : AttemptEnd::kRetryableError,
          lost_by_restart ? "lease held across a coordinator restart expired: its group did not "
                            "come back (not counted toward max_attempts)"
                          : "lease expired",
          now, &to));
      ++expired;
    }
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<LeaseTokens> SqliteStore::HeldLeases(double* latest_expiry) {
  std::lock_guard<std::mutex> lock(mu_);
  static const std::string kSql =
      absl::StrCat("SELECT job_id, fencing_token, lease_expires_at FROM jobs WHERE status IN ",
                   StatesIn(IsHeld));
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked(kSql));
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  LeaseTokens held;
  double latest = 0;
  for (const auto& row : rows.rows) {
    held[AsText(row[0])] = AsInt(row[1]);
    latest = std::max(latest, AsReal(row[2]));
  }
  if (latest_expiry != nullptr) *latest_expiry = latest;
  return held;
}

absl::StatusOr<int64_t> SqliteStore::ExtendLeases(double until) {
  int64_t extended = 0;
  RETURN_IF_ERROR(Write([&]() -> absl::Status {
    static const std::string kSql =
        absl::StrCat("UPDATE jobs SET lease_expires_at = ?1 WHERE status IN ", StatesIn(IsHeld),
                     " AND lease_expires_at < ?1");
    ASSIGN_OR_RETURN(Statement * s, PrepareLocked(kSql));
    s->Bind(1, until);
    RETURN_IF_ERROR(WriteLocked(s, "extending leases"));
    extended = sqlite3_changes(db_);
    return absl::OkStatus();
  }));
  return extended;
}

absl::StatusOr<int64_t> SqliteStore::CountActiveJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  static const std::string kSql =
      absl::StrCat("SELECT COUNT(*) FROM jobs WHERE status IN ", StatesIn(IsActive));
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked(kSql));
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  return AsInt(Cell(rows, 0, 0));
}

absl::StatusOr<double> SqliteStore::SweepStartedAt(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT MIN(a.started_at) FROM attempts a JOIN sweep_jobs sj "
                                 "ON sj.job_id = a.job_id WHERE sj.sweep_id = ?1"));
  s->Bind(1, sweep_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  const Value& v = Cell(rows, 0, 0);
  return std::holds_alternative<double>(v) ? AsReal(v) : 0.0;
}

absl::StatusOr<std::vector<JobProgressRow>> SqliteStore::JobProgress(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked("SELECT j.job_id, j.family, j.scale, j.status, j.sparsity, j.train_flops, "
                    "j.stride, j.context, j.attempt, j.last_step, j.steps, j.start_step, "
                    "CASE j.role WHEN 'trunk' THEN 0.0 ELSE j.flops_per_token * j.steps * "
                    "j.batch_tokens END, "
                    "(SELECT m.value FROM metrics m WHERE m.job_id = j.job_id AND "
                    "m.name = 'val_loss' ORDER BY m.step DESC LIMIT 1), "
                    "(SELECT MAX(m.step) FROM metrics m WHERE m.job_id = j.job_id AND "
                    "m.name = 'train_loss') "
                    "FROM sweep_jobs sj JOIN jobs j ON j.job_id = sj.job_id "
                    "WHERE sj.sweep_id = ?1 ORDER BY j.train_flops, j.job_id"));
  s->Bind(1, sweep_id);
  ASSIGN_OR_RETURN(QueryResult rows, CollectLocked(s));
  std::vector<JobProgressRow> out;
  for (const auto& r : rows.rows) {
    JobProgressRow p;
    p.job_id = AsText(r[0]);
    p.family = AsText(r[1]);
    p.scale = AsText(r[2]);
    p.status = AsText(r[3]);
    p.sparsity = AsReal(r[4]);
    p.train_flops = AsReal(r[5]);
    p.stride = AsInt(r[6]);
    p.context = AsInt(r[7]);
    p.attempt = AsInt(r[8]);
    p.step = AsInt(r[9]);
    if (const auto* reported = std::get_if<int64_t>(&r[14])) p.step = std::max(p.step, *reported);
    p.steps = AsInt(r[10]);
    p.start_step = AsInt(r[11]);
    p.standalone_flops = AsReal(r[12]);
    if (const auto* v = std::get_if<double>(&r[13])) p.final_val_loss = *v;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace xmod
