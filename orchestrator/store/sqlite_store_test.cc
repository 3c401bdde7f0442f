#include "orchestrator/store/sqlite_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "orchestrator/store/cells.h"
#include "orchestrator/store/store_test_util.h"
#include "schema/migrations.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

using store_test::Dump;
using store_test::Expand;

SweepSpec Smoke() { return store_test::LoadSpec("sweeps/smoke.yaml"); }

std::unique_ptr<SqliteStore> OpenMemory(WriteFaults* faults = nullptr) {
  SqliteStore::Options options;
  options.path = ":memory:";
  options.faults = faults;
  static FakeClock fixed(1000.0);
  options.clock = &fixed;
  auto store = SqliteStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("xmod_store_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// The first column of `pragma`'s one row on `db`, as text.
std::string PragmaValue(sqlite3* db, const char* pragma) {
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, pragma, -1, &stmt, nullptr), SQLITE_OK) << pragma;
  EXPECT_EQ(sqlite3_step(stmt), SQLITE_ROW) << pragma;
  const unsigned char* text = sqlite3_column_text(stmt, 0);
  std::string value = text == nullptr ? "" : reinterpret_cast<const char*>(text);
  sqlite3_finalize(stmt);
  return value;
}

TEST(SqliteStore, MigratesANewFileToTheLatestSchemaVersion) {
  TempDir dir;
  SqliteStore::Options options;
  options.path = dir.File("x.db");
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->SchemaVersion().value(), SchemaMigrations().back().version);
  store->reset();
  // The journal mode is a property of the file; read it back with SQLite itself.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(options.path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(PragmaValue(db, "PRAGMA journal_mode"), "wal");
  sqlite3_close(db);
}

// Version 6 rebuilds `jobs` (its family check admits moe and deco): a version-5
// file keeps every row of every table, its foreign keys still hold and are still
// enforced, and a moe job can then be stored.
TEST(SqliteStore, MigratesAVersionFiveFileKeepingItsRowsAndForeignKeys) {
  TempDir dir;
  const std::string path = dir.File("v5.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const auto exec = [&](const std::string& sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
    const std::string text = message ? message : "";
    sqlite3_free(message);
    return rc == SQLITE_OK ? std::string() : text;
  };
  for (const Migration& m : SchemaMigrations()) {
    if (m.version > 5) break;
    ASSERT_EQ(exec(m.sql), "") << m.name;
    ASSERT_EQ(exec("PRAGMA user_version=" + std::to_string(m.version)), "");
  }
  const std::string job_columns =
      "job_id, family, scale, sparsity, capacity, stride, context, n_layers, dense_layers, "
      "d_model, n_heads, d_ff, vocab_size, n_params_total, n_params_active, flops_per_token, "
      "dense_flops_per_token, budget_kind, budget_value, tokens, steps, train_flops, "
      "batch_tokens, ranks, max_attempts, config_json, created_at, updated_at";
  ASSERT_EQ(exec("INSERT INTO sweeps VALUES (1, 's', 'name: s', 's.yaml', 0, 0);"
                 "INSERT INTO jobs (" +
                 job_columns +
                 ") VALUES ('a', 'xmod', 'x', 0.5, 0.5, 2, "
                 "32, 4, 2, 32, 4, 96, 64, 1000, 800, 6000, 6000, 'tokens', 1, 10, 1, 60000, 10, "
                 "1, 3, '{\"seed\": 1}', 0, 0);"
                 "INSERT INTO sweep_jobs VALUES (1, 'a');"
                 "INSERT INTO metrics VALUES ('a', 'val_loss', 1, 2.5, 10, 60000, 1, 0);"),
            "");
  sqlite3_close(db);
  SqliteStore::Options options;
  options.path = path;
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->SchemaVersion().value(), SchemaMigrations().back().version);
  auto rows =
      (*store)->Query("SELECT job_id, family, final_val_loss, param_sparsity FROM job_results");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(AsText(Cell(*rows, 0, 0)), "a");
  EXPECT_EQ(AsText(Cell(*rows, 0, 1)), "xmod");
  EXPECT_EQ(AsReal(Cell(*rows, 0, 2)), 2.5);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(Cell(*rows, 0, 3)));
  store->reset();
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(exec("PRAGMA foreign_keys=ON"), "");
  EXPECT_NE(exec("INSERT INTO sweep_jobs VALUES (1, 'missing')"), "");  // still enforced
  EXPECT_EQ(exec("UPDATE jobs SET family = 'moe' WHERE job_id = 'a'"), "");
  // Since version 10 the family is the registry's to check (common/family.h), not
  // SQLite's: a name this build does not know is stored, and reading it back is
  // refused with the job and the known families named.
  EXPECT_EQ(exec("UPDATE jobs SET family = 'echo' WHERE job_id = 'a'"), "");
  EXPECT_NE(exec("UPDATE jobs SET role = 'twig' WHERE job_id = 'a'"), "");  // other checks stay
  sqlite3_close(db);
  store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto read = (*store)->JobResultRows("s");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(read.status().message()),
              ::testing::HasSubstr("job a: unknown family 'echo' (known: dense, xmod, mod"));
}

TEST(SqliteStore, RefusesADatabaseFromANewerXmod) {
  TempDir dir;
  SqliteStore::Options options;
  options.path = dir.File("x.db");
  ASSERT_TRUE(SqliteStore::Open(options).ok());
  // Pretend a newer xmod migrated the file (the test talks to SQLite directly).
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(options.path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = SqliteStore::Open(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("newer than this xmod"));
}

TEST(SqliteStore, ReadOnlyOpenOfAMissingFileIsNotFoundAndCreatesNothing) {
  TempDir dir;
  SqliteStore::Options options;
  options.path = dir.File("missing.db");
  options.read_only = true;
  auto store = SqliteStore::Open(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(options.path));
}

TEST(SqliteStore, SubmittingTheSameSweepTwiceChangesNothing) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  auto first = store->SubmitSweep(spec, Expand(spec));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->sweep_created);
  EXPECT_EQ(first->new_jobs, 8);
  const std::string before = Dump(*store);
  auto second = store->SubmitSweep(spec, Expand(spec));
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->sweep_created);
  EXPECT_EQ(second->new_jobs, 0);
  EXPECT_EQ(second->linked_jobs, 0);
  EXPECT_EQ(Dump(*store), before);
}

TEST(SqliteStore, AWiderGridAddsOnlyTheNewJobs) {
  auto store = OpenMemory();
  SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  ASSERT_TRUE(store->TransitionJob(Expand(spec)[0].file.id, JobState::kLeased, "test").ok());
  spec.grid_stride = {2, 4};
  spec.yaml_text += "\n# wider\n";
  auto wider = store->SubmitSweep(spec, Expand(spec));
  ASSERT_TRUE(wider.ok()) << wider.status();
  EXPECT_EQ(wider->jobs_in_spec, 12);  // + 2 sparsities at stride 4, per scale
  EXPECT_EQ(wider->new_jobs, 4);
  // The job that was already running keeps its state.
  EXPECT_EQ(store->GetJobState(Expand(spec)[0].file.id).value(), JobState::kLeased);
}

TEST(SqliteStore, ASecondSweepSharesExistingJobs) {
  auto store = OpenMemory();
  SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  spec.name = "smoke-copy";
  auto copy = store->SubmitSweep(spec, Expand(spec));
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->new_jobs, 0);
  EXPECT_EQ(copy->linked_jobs, 8);
  auto counts = store->CountStates("");
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(counts->size(), 2u);
  EXPECT_EQ((*counts)[1].counts.at(JobState::kPending), 8);
}

TEST(SqliteStore, LegalTransitionsWalkAJobToSucceeded) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  const std::string id = Expand(spec)[0].file.id;
  for (JobState to : {JobState::kLeased, JobState::kRunning, JobState::kPending, JobState::kLeased,
                      JobState::kRunning, JobState::kSucceeded}) {
    ASSERT_TRUE(store->TransitionJob(id, to, "test").ok()) << JobStateName(to);
    EXPECT_EQ(store->GetJobState(id).value(), to);
  }
}

// One test per illegal move out of each state: refused, and nothing written.
class IllegalTransition
    : public ::testing::TestWithParam<std::tuple<std::vector<JobState>, JobState>> {};

TEST_P(IllegalTransition, IsRefusedAndLeavesTheJobAsItWas) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  const std::string id = Expand(spec)[0].file.id;
  const auto& [path, illegal] = GetParam();
  for (JobState to : path) ASSERT_TRUE(store->TransitionJob(id, to, "setup").ok());
  const JobState before = store->GetJobState(id).value();
  const std::string dump = Dump(*store);
  absl::Status s = store->TransitionJob(id, illegal, "test");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(std::string("illegal transition ") + std::string(JobStateName(before)) +
                        " -> " + std::string(JobStateName(illegal))));
  EXPECT_EQ(Dump(*store), dump);
}

using S = JobState;
INSTANTIATE_TEST_SUITE_P(
    EveryState, IllegalTransition,
    ::testing::Values(
        std::make_tuple(std::vector<S>{}, S::kRunning),
        std::make_tuple(std::vector<S>{}, S::kSucceeded),
        std::make_tuple(std::vector<S>{}, S::kFailed),
        std::make_tuple(std::vector<S>{S::kLeased}, S::kSucceeded),
        std::make_tuple(std::vector<S>{S::kLeased}, S::kLeased),
        std::make_tuple(std::vector<S>{S::kLeased, S::kRunning}, S::kLeased),
        std::make_tuple(std::vector<S>{S::kLeased, S::kRunning, S::kSucceeded}, S::kPending),
        std::make_tuple(std::vector<S>{S::kLeased, S::kRunning, S::kSucceeded}, S::kCancelled),
        std::make_tuple(std::vector<S>{S::kLeased, S::kFailed}, S::kRunning),
        std::make_tuple(std::vector<S>{S::kLeased, S::kFailed}, S::kSucceeded),
        std::make_tuple(std::vector<S>{S::kCancelled}, S::kLeased),
        std::make_tuple(std::vector<S>{S::kCancelled}, S::kFailed)));

TEST(SqliteStore, TransitionOfAnUnknownJobIsNotFound) {
  auto store = OpenMemory();
  EXPECT_EQ(store->TransitionJob("0000000000000000", JobState::kLeased, "x").code(),
            absl::StatusCode::kNotFound);
}

TEST(SqliteStore, ResumeAndCancelMoveOnlyTheRightJobs) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  const auto jobs = Expand(spec);
  ASSERT_TRUE(store->SubmitSweep(spec, jobs).ok());
  ASSERT_TRUE(store->TransitionJob(jobs[0].file.id, S::kLeased, "").ok());
  ASSERT_TRUE(store->TransitionJob(jobs[0].file.id, S::kRunning, "").ok());
  ASSERT_TRUE(store->TransitionJob(jobs[0].file.id, S::kSucceeded, "").ok());
  ASSERT_TRUE(store->TransitionJob(jobs[1].file.id, S::kLeased, "").ok());
  ASSERT_TRUE(store->TransitionJob(jobs[1].file.id, S::kFailed, "diverged").ok());
  EXPECT_EQ(store->Cancel(jobs[2].file.id).value(), 1);
  EXPECT_EQ(store->ResumeSweep("smoke").value(), 2);  // the failed and the cancelled job
  EXPECT_EQ(store->GetJobState(jobs[0].file.id).value(), S::kSucceeded);
  EXPECT_EQ(store->Cancel("smoke").value(), 7);  // everything but the succeeded job
  EXPECT_EQ(store->Cancel("no-such-thing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->ResumeSweep("no-such-sweep").status().code(), absl::StatusCode::kNotFound);
}

// A failure at any write of a submit leaves the database exactly as it was.
TEST(SqliteStore, AFailedWriteAnywhereInASubmitLeavesTheDatabaseAsItWas) {
  WriteFaults faults;
  auto store = OpenMemory(&faults);
  SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  spec.grid_stride = {2, 4};
  spec.yaml_text += "\n# wider\n";
  const auto wider = Expand(spec);
  const std::string before = Dump(*store);

  // Count the writes a clean submit of the wider grid makes, on a scratch store.
  WriteFaults counter;
  auto scratch = OpenMemory(&counter);
  ASSERT_TRUE(scratch->SubmitSweep(Smoke(), Expand(Smoke())).ok());
  counter.Clear();
  ASSERT_TRUE(scratch->SubmitSweep(spec, wider).ok());
  const int64_t writes = counter.writes();
  ASSERT_GT(writes, 20);

  for (int64_t n = 1; n <= writes; ++n) {
    faults.FailNthWrite(n);
    auto result = store->SubmitSweep(spec, wider);
    ASSERT_FALSE(result.ok()) << "write " << n;
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("injected fault"));
    faults.Clear();
    ASSERT_EQ(Dump(*store), before) << "after a failure at write " << n;
  }
  faults.FailWritesAfter(writes / 2);
  EXPECT_FALSE(store->SubmitSweep(spec, wider).ok());
  faults.Clear();
  EXPECT_EQ(Dump(*store), before);
  // And with the faults gone, the same submit goes through.
  auto ok = store->SubmitSweep(spec, wider);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->new_jobs, 4);
}

// A failure reaches the caller as what it should do about it: retry (busy, I/O),
// free space (full), restore the file (corrupt). Injected faults carry SQLite's
// codes and are mapped by the same function as real ones.
TEST(SqliteStore, SqliteFailuresBecomeTheStatusTheCallerShouldActOn) {
  const std::pair<int, absl::StatusCode> table[] = {
      {kSqliteBusy, absl::StatusCode::kUnavailable},
      {kSqliteIoErr, absl::StatusCode::kUnavailable},
      {kSqliteFull, absl::StatusCode::kResourceExhausted},
      {kSqliteCorrupt, absl::StatusCode::kDataLoss},
  };
  for (const auto& [sqlite_code, expected] : table) {
    EXPECT_EQ(SqliteStatusCode(sqlite_code), expected) << sqlite_code;
    WriteFaults faults;
    auto store = OpenMemory(&faults);
    faults.FailNthWrite(1, sqlite_code);
    auto result = store->SubmitSweep(Smoke(), Expand(Smoke()));
    EXPECT_EQ(result.status().code(), expected) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("injected fault at write 1"));
  }
  EXPECT_EQ(SqliteStatusCode(0), absl::StatusCode::kOk);
  EXPECT_EQ(SqliteStatusCode(5 | (1 << 8)), absl::StatusCode::kUnavailable);  // BUSY_RECOVERY
  EXPECT_EQ(SqliteStatusCode(8), absl::StatusCode::kFailedPrecondition);      // READONLY
  EXPECT_EQ(SqliteStatusCode(19), absl::StatusCode::kFailedPrecondition);     // CONSTRAINT
  EXPECT_EQ(SqliteStatusCode(26), absl::StatusCode::kDataLoss);               // NOTADB
  EXPECT_EQ(SqliteStatusCode(1), absl::StatusCode::kInternal);                // ERROR
}

// The same mapping for real failures: a file that is not a database, and a
// database another connection keeps locked past the busy timeout.
TEST(SqliteStore, AFileThatIsNotADatabaseIsDataLossAndALockedOneIsUnavailable) {
  const std::string dir = ::testing::TempDir() + "/xmod_store_codes_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream junk(dir + "/junk.db");
    junk << std::string(8192, 'x');
  }
  SqliteStore::Options o;
  o.path = dir + "/junk.db";
  EXPECT_EQ(SqliteStore::Open(o).status().code(), absl::StatusCode::kDataLoss);

  o.path = dir + "/locked.db";
  o.busy_timeout_ms = 50;
  auto store = SqliteStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(o.path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto result = (*store)->SubmitSweep(Smoke(), Expand(Smoke()));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_TRUE((*store)->SubmitSweep(Smoke(), Expand(Smoke())).ok());  // and it goes through after
  std::filesystem::remove_all(dir);
}

// Provenance (schema 12): an attempt keeps the build and host of the group it was
// granted to, and JobCommits gives each job's newest attempt's commit.
TEST(SqliteStore, AnAttemptKeepsItsGroupsBuildAndHost) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  ASSERT_TRUE(store->UpsertWorker("old", "h0", 1, 0.0).ok());  // a group from before builds
  ASSERT_TRUE(store->UpsertWorker("w", "h1", 1, 0.0, R"({"commit": "0123456789ab"})").ok());
  const LeaseGrant a = store->LeaseNextJob("old", 1, 0.0, 60.0).value().value();
  const LeaseGrant b = store->LeaseNextJob("w", 1, 0.0, 60.0).value().value();
  auto rows = store->Query("SELECT job_id, host, build FROM attempts ORDER BY host");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(rows->rows[0][1]), "h0");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(rows->rows[0][2]));
  EXPECT_EQ(std::get<std::string>(rows->rows[1][1]), "h1");
  EXPECT_EQ(std::get<std::string>(rows->rows[1][2]), R"({"commit": "0123456789ab"})");
  auto commits = store->JobCommits("smoke");
  ASSERT_TRUE(commits.ok()) << commits.status();
  EXPECT_EQ(commits->size(), 2u);
  EXPECT_EQ(commits->at(a.job_id), "");
  EXPECT_EQ(commits->at(b.job_id), "0123456789ab");
  EXPECT_TRUE(store->JobCommits("no-such-sweep")->empty());
}

TEST(SqliteStore, MetricsFeedTheResultsAndCurveViews) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  const auto jobs = Expand(spec);
  ASSERT_TRUE(store->SubmitSweep(spec, jobs).ok());
  auto results = store->JobResults("smoke");
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->rows.size(), 8u);
  const auto col = [&](const std::string& name) {
    return std::find(results->columns.begin(), results->columns.end(), name) -
           results->columns.begin();
  };
  // Losses are empty until jobs run.
  for (const auto& row : results->rows) {
    EXPECT_TRUE(std::holds_alternative<std::monostate>(row[col("final_val_loss")]));
  }
  // Metrics enter only through the fenced path, as a worker's do.
  ASSERT_TRUE(store->UpsertWorker("w", "host", 1, 0.0).ok());
  const LeaseGrant first = store->LeaseNextJob("w", 1, 0.0, 60.0).value().value();
  const std::string id = first.job_id;
  std::vector<MetricPoint> batch;
  for (int step = 1; step <= 4; ++step) {
    batch.push_back({id, "train_loss", step, 5.0 - step, step * 1024, step * 1e6, 1, 0.0});
    if (step % 2 == 0)
      batch.push_back({id, "val_loss", step, 4.5 - step, step * 1024, step * 1e6, 1, 0.0});
  }
  ASSERT_TRUE(store->AppendFencedMetrics(id, first.fencing_token, batch, 0.0).ok());
  // A later attempt (resumed from step 2) replaces the steps after it; the older
  // attempt's late write is refused.
  ASSERT_TRUE(store
                  ->RecordCheckpoint(id, first.fencing_token, 2,
                                     "runs/" + id + "/checkpoints/step_00000002", "c", 1.0)
                  .ok());
  ASSERT_TRUE(
      store->EndAttempt(id, first.fencing_token, AttemptEnd::kPreempted, 2, "test", 1.0).ok());
  const LeaseGrant second = store->LeaseNextJob("w", 1, 2.0, 60.0).value().value();
  ASSERT_EQ(second.job_id, id);
  ASSERT_EQ(second.resume_step, 2);
  ASSERT_TRUE(store
                  ->AppendFencedMetrics(id, second.fencing_token,
                                        {{id, "train_loss", 3, 2.0, 3072, 3e6, 2, 0.0},
                                         {id, "train_loss", 4, 1.0, 4096, 4e6, 2, 0.0},
                                         {id, "val_loss", 4, 0.25, 4096, 4e6, 2, 0.0}},
                                        3.0)
                  .ok());
  EXPECT_EQ(store
                ->AppendFencedMetrics(id, first.fencing_token,
                                      {{id, "val_loss", 4, 9.0, 4096, 4e6, 1, 0.0}}, 4.0)
                .code(),
            absl::StatusCode::kFailedPrecondition);
  results = store->JobResults("smoke");
  ASSERT_TRUE(results.ok());
  bool found = false;
  for (const auto& row : results->rows) {
    if (std::get<std::string>(row[col("job_id")]) != id) continue;
    found = true;
    EXPECT_DOUBLE_EQ(std::get<double>(row[col("final_val_loss")]), 0.25);
    EXPECT_DOUBLE_EQ(std::get<double>(row[col("best_val_loss")]), 0.25);
    EXPECT_EQ(std::get<int64_t>(row[col("last_step")]), 4);
  }
  EXPECT_TRUE(found);
  auto curve = store->JobCurve(id);
  ASSERT_TRUE(curve.ok());
  ASSERT_EQ(curve->rows.size(), 4u);
  EXPECT_EQ(std::get<int64_t>(curve->rows[3][1]), 4);     // step
  EXPECT_EQ(std::get<int64_t>(curve->rows[3][2]), 4096);  // tokens
  EXPECT_EQ(store->JobCurve("nope").status().code(), absl::StatusCode::kNotFound);
}

// The data version (the dashboard's ETag) rises with every write a sweep's
// answers show, in the same transaction, and with nothing else: an unchanged
// version means an unchanged answer.
TEST(SqliteStore, TheDataVersionRisesWithEveryWriteASweepShowsAndWithNothingElse) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  ASSERT_TRUE(store->SubmitSweep(spec, Expand(spec)).ok());
  int64_t last = store->SweepDataVersion("smoke").value();
  EXPECT_GT(last, 0);
  EXPECT_EQ(store->SweepDataVersion("nope").status().code(), absl::StatusCode::kNotFound);
  const auto rose = [&](const std::string& what) {
    const int64_t now = store->SweepDataVersion("smoke").value();
    EXPECT_GT(now, last) << what;
    last = now;
  };
  const auto same = [&](const std::string& what) {
    EXPECT_EQ(store->SweepDataVersion("smoke").value(), last) << what;
  };
  ASSERT_TRUE(store->UpsertWorker("w", "host", 1, 0.0).ok());
  same("a worker registered");
  const LeaseGrant g = store->LeaseNextJob("w", 1, 0.0, 60.0).value().value();
  rose("a lease");
  const int64_t job_version = store->JobDataVersion(g.job_id).value();
  EXPECT_EQ(job_version, last);  // the job is in one sweep
  ASSERT_TRUE(store->RenewLease(g.job_id, "w", g.fencing_token, 1, 1.0, 60.0).ok());
  rose("a heartbeat");
  ASSERT_TRUE(store
                  ->AppendFencedMetrics(g.job_id, g.fencing_token,
                                        {{g.job_id, "train_loss", 2, 3.0, 2048, 2e6, 1, 0.0}}, 2.0)
                  .ok());
  rose("a metric");
  EXPECT_GT(store->JobDataVersion(g.job_id).value(), job_version);
  ASSERT_TRUE(store
                  ->RecordCheckpoint(g.job_id, g.fencing_token, 2,
                                     "runs/" + g.job_id + "/checkpoints/step_00000002", "c", 2.0)
                  .ok());
  rose("a checkpoint");
  ASSERT_TRUE(store->ExtendLeases(500.0).ok());
  same("leases extended");
  ASSERT_TRUE(store->SetOrderKeys({{g.job_id, 1.0}}).ok());
  same("order keys");
  ASSERT_TRUE(store->JobResults("smoke").ok() && store->JobDetail(g.job_id).ok() &&
              store->Fits("smoke").ok());
  same("reads");
  ASSERT_TRUE(
      store->EndAttempt(g.job_id, g.fencing_token, AttemptEnd::kFatalError, 2, "x", 3.0).ok());
  rose("a failed attempt");
  ASSERT_EQ(store->ResumeSweep("smoke").value(), 1);
  rose("a resume");
  ASSERT_GT(store->Cancel("smoke").value(), 0);
  rose("a cancel");
  FitRecord fit;
  fit.law = "dense";
  fit.params_json = fit.result_json = "{}";
  ASSERT_TRUE(store->RecordFit("smoke", fit).ok());
  rose("a fit");
  EXPECT_EQ(store->JobDataVersion("nope").status().code(), absl::StatusCode::kNotFound);
}

// Issue 45: submitting an unchanged spec again is a no-op. The sweep's data
// version (the dashboard's ETag) stays, and SQLite's own data_version, read on a
// second connection, shows that no transaction changed the file.
TEST(SqliteStore, ResubmittingAnUnchangedSweepWritesNothing) {
  TempDir dir;
  SqliteStore::Options options;
  options.path = dir.File("x.db");
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  const SweepSpec spec = Smoke();
  const std::vector<ResolvedJob> jobs = Expand(spec);
  ASSERT_TRUE((*store)->SubmitSweep(spec, jobs).ok());
  const int64_t version = (*store)->SweepDataVersion("smoke").value();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(options.path.c_str(), &db), SQLITE_OK);
  const auto file_version = [db] { return PragmaValue(db, "PRAGMA data_version"); };
  const std::string before = file_version();
  const auto again = (*store)->SubmitSweep(spec, jobs);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->new_jobs, 0);
  EXPECT_EQ(again->linked_jobs, 0);
  EXPECT_FALSE(again->sweep_created);
  EXPECT_EQ((*store)->SweepDataVersion("smoke").value(), version);
  EXPECT_EQ(file_version(), before) << "the resubmission committed a change to the file";
  // A changed spec text is a change: the sweep row is rewritten, the version rises.
  SweepSpec wider = spec;
  wider.yaml_text += "\n# wider\n";
  ASSERT_TRUE((*store)->SubmitSweep(wider, jobs).ok());
  EXPECT_GT((*store)->SweepDataVersion("smoke").value(), version);
  EXPECT_NE(file_version(), before);
  sqlite3_close(db);
}

TEST(SqliteStore, MetricsForAnUnknownJobAreRefusedWhole) {
  auto store = OpenMemory();
  const SweepSpec spec = Smoke();
  const auto jobs = Expand(spec);
  ASSERT_TRUE(store->SubmitSweep(spec, jobs).ok());
  const std::string before = Dump(*store);
  absl::Status s = store->AppendFencedMetrics(
      "ffffffffffffffff", 1, {{"ffffffffffffffff", "train_loss", 1, 1.0, 1, 1.0, 1, 0.0}}, 0.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(Dump(*store), before);
}

TEST(SqliteStore, QueryRefusesStatementsThatWrite) {
  auto store = OpenMemory();
  for (const char* sql :
       {"DELETE FROM jobs", "INSERT INTO workers VALUES ('w', 'h', 1, 0, 0, NULL)",
        "DROP TABLE jobs", "PRAGMA user_version=6"}) {
    auto r = store->Query(sql);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << sql;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("would write")) << sql;
  }
  EXPECT_EQ(store->Query("SELEC 1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Query("SELECT 1; DELETE FROM jobs").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->Query("SELECT COUNT(*) FROM job_results").ok());
}

TEST(SqliteStore, AReadOnlyStoreRefusesEveryWrite) {
  TempDir dir;
  SqliteStore::Options options;
  options.path = dir.File("x.db");
  {
    auto writer = SqliteStore::Open(options);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->SubmitSweep(Smoke(), Expand(Smoke())).ok());
  }
  options.read_only = true;
  auto reader = SqliteStore::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_FALSE((*reader)->Cancel("smoke").ok());
  EXPECT_EQ((*reader)->CountStates("smoke").value()[0].counts.at(JobState::kPending), 8);
}

}  // namespace
}  // namespace xmod
