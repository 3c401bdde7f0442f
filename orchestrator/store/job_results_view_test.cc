// Migration 9 reads what job_results needs from each job's config, and each
// job's last metric step and final evaluation, from tables kept by a trigger and
// by the store's write path. The view must still give exactly the rows of
// version 7's definition, the store's results read the granularity the old
// expression gave, and its typed read the same values: this builds a small
// database with every kind of job, writes metrics the way workers do, and
// compares the forms cell by cell, SQLite types included.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "orchestrator/store/cells.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/store/store_test_util.h"
#include "schema/migrations.h"

namespace xmod {
namespace {

// Version 7's SELECT of job_results, from the migration embedded in the binary.
std::string VersionSevenView() {
  const std::string& sql = SchemaMigrations().at(6).sql;
  const std::string head = "CREATE VIEW job_results AS";
  const size_t begin = sql.find(head);
  EXPECT_NE(begin, std::string::npos);
  const size_t end = sql.find(';', begin);
  return sql.substr(begin + head.size(), end - begin - head.size());
}

// The former SqliteStore::JobResults statement, over version 7's view.
std::string FormerResultsRead(const std::string& sweep) {
  return "SELECT r.*, CASE WHEN r.family = 'moe' THEN json_extract(j.config_json, '$.d_ff') / "
         "json_extract(j.config_json, '$.experts.width') END AS granularity FROM (" +
         VersionSevenView() + ") r JOIN jobs j ON j.job_id = r.job_id WHERE r.sweep = '" + sweep +
         "' ORDER BY r.train_flops, r.job_id";
}

void ExpectSameRows(const QueryResult& old_rows, const QueryResult& new_rows,
                    const std::string& what) {
  ASSERT_EQ(new_rows.columns, old_rows.columns) << what;
  ASSERT_EQ(new_rows.rows.size(), old_rows.rows.size()) << what;
  for (size_t r = 0; r < old_rows.rows.size(); ++r) {
    for (size_t c = 0; c < old_rows.columns.size(); ++c) {
      // Value compares the kind (NULL, integer, real, text) before the value.
      EXPECT_EQ(new_rows.rows[r][c], old_rows.rows[r][c])
          << what << ": row " << r << " (" << std::get<std::string>(old_rows.rows[r][1])
          << "), column " << old_rows.columns[c];
    }
  }
}

// The typed read gives the display table's values: the enums by their stored
// names, NULL as an empty optional (or 0 / "" where JobResultRow says so).
void ExpectTypedRowsMatch(const QueryResult& table,
                          const absl::StatusOr<std::vector<JobResultRow>>& typed,
                          const std::string& what) {
  ASSERT_TRUE(typed.ok()) << typed.status();
  ASSERT_EQ(typed->size(), table.rows.size()) << what;
  const auto cell = [&](size_t row, const std::string& name) -> const Value& {
    const size_t c =
        std::find(table.columns.begin(), table.columns.end(), name) - table.columns.begin();
    EXPECT_LT(c, table.columns.size()) << name;
    return Cell(table, row, c);
  };
  const auto loss = [&](size_t row, const std::string& name) -> std::optional<double> {
    const Value& v = cell(row, name);
    if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
    return AsReal(v);
  };
  for (size_t i = 0; i < typed->size(); ++i) {
    const JobResultRow& j = (*typed)[i];
    SCOPED_TRACE(what + ": " + j.id);
    EXPECT_EQ(j.id, AsText(cell(i, "job_id")));
    EXPECT_EQ(FamilyName(j.family), AsText(cell(i, "family")));
    EXPECT_EQ(JobStateName(j.state), AsText(cell(i, "status")));
    EXPECT_EQ(JobRoleName(j.role), AsText(cell(i, "role")));
    EXPECT_EQ(j.config_key, AsText(cell(i, "config_key")));
    EXPECT_EQ(j.cluster_key, AsText(cell(i, "cluster_key")));
    EXPECT_EQ(j.matched_to, AsText(cell(i, "matched_to")));
    EXPECT_EQ(j.experts, AsInt(cell(i, "experts")));
    EXPECT_EQ(j.top_k, AsInt(cell(i, "top_k")));
    EXPECT_EQ(j.granularity, AsInt(cell(i, "granularity")));
    EXPECT_EQ(j.seed, AsInt(cell(i, "seed")));
    EXPECT_EQ(j.tokens_trained, AsInt(cell(i, "tokens_trained")));
    EXPECT_EQ(j.n_embedding, AsReal(cell(i, "n_params_embedding")));
    EXPECT_EQ(j.train_flops, AsReal(cell(i, "train_flops")));
    EXPECT_EQ(j.final_val_loss, loss(i, "final_val_loss"));
    EXPECT_EQ(j.final_val_loss_causal, loss(i, "final_val_loss_causal"));
    EXPECT_EQ(j.final_val_loss_se, loss(i, "final_val_loss_se"));
    EXPECT_EQ(j.final_val_loss_causal_se, loss(i, "final_val_loss_causal_se"));
    EXPECT_EQ(j.final_capacity, loss(i, "final_capacity"));
    EXPECT_EQ(j.final_capacity_causal, loss(i, "final_capacity_causal"));
    EXPECT_EQ(j.final_flops_ratio_causal, loss(i, "final_flops_ratio_causal"));
  }
}

class RawDatabase {
 public:
  explicit RawDatabase(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDatabase() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* message = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
    EXPECT_EQ(rc, SQLITE_OK) << (message ? message : "") << "\n" << sql;
    sqlite3_free(message);
  }

 private:
  sqlite3* db_ = nullptr;
};

// A trainer's reports for steps first..last of a job: train loss and lr at each
// step, an evaluation every 5 steps (with the causal values of the routed
// families), each value distinct.
std::vector<MetricPoint> Reports(const LeaseGrant& g, const std::string& family, int64_t first,
                                 int64_t last) {
  std::vector<MetricPoint> out;
  const double base = 3.0 + static_cast<double>(g.job_id[0] % 7) * 0.01 + 0.1 * g.attempt;
  const auto add = [&](const char* name, int64_t step, double value) {
    out.push_back({g.job_id, name, step, value, step * 64, step * 1e9, g.attempt, 0.0});
  };
  for (int64_t step = first; step <= last; ++step) {
    add("train_loss", step, base + 1.0 / static_cast<double>(step));
    add("lr", step, 1e-3);
    if (step % 5 != 0) continue;
    add("val_loss", step, base + 2.0 / static_cast<double>(step));
    add("val_loss_se", step, 0.01);
    add("val_capacity", step, 0.5);
    if (family != "xmod" && family != "mod") continue;
    add("val_loss_causal", step, base + 3.0 / static_cast<double>(step));
    add("val_loss_causal_se", step, 0.02);
    add("val_capacity_causal", step, 0.45);
    add("val_flops_ratio_causal", step, 0.6);
  }
  return out;
}

std::string CheckpointPath(const LeaseGrant& g, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return "runs/" + g.job_id + "/checkpoints/" + name;
}

TEST(JobResultsView, GivesTheRowsOfVersionSevensDefinition) {
  FakeClock clock(1000.0);
  store_test::TempDatabase db(&clock);
  SqliteStore* store = db.store();
  // Every family, replicates, cooldown trunks with their branches, and the smoke
  // jobs in a second sweep too.
  for (const char* file : {"sweeps/smoke.yaml", "sweeps/baselines.yaml", "sweeps/moe.yaml",
                           "tests/fixtures/wsd_branches.yaml"}) {
    SweepSpec spec = store_test::LoadSpec(file);
    ASSERT_TRUE(store->SubmitSweep(spec, store_test::Expand(spec)).ok()) << file;
  }
  SweepSpec again = store_test::LoadSpec("sweeps/smoke.yaml");
  again.name = "smoke-again";
  ASSERT_TRUE(store->SubmitSweep(again, store_test::Expand(again)).ok());
  {
    // A branch and its trunk written by another program in the other order (the
    // store writes trunks first): the branch's cluster key comes from its trunk.
    RawDatabase raw(db.path());
    raw.Exec(
        "CREATE TEMP TABLE copied AS SELECT * FROM jobs WHERE role = 'branch' LIMIT 1;"
        "CREATE TEMP TABLE copied_trunk AS SELECT * FROM jobs WHERE job_id = "
        "(SELECT parent_id FROM copied);"
        "UPDATE copied SET job_id = 'late-branch', parent_id = 'late-trunk';"
        "UPDATE copied_trunk SET job_id = 'late-trunk', "
        "config_json = json_set(config_json, '$.seed', 99);"
        "INSERT INTO jobs SELECT * FROM copied;"
        "INSERT INTO jobs SELECT * FROM copied_trunk;"
        "INSERT INTO sweep_jobs SELECT sweep_id, 'late-branch' FROM sweeps WHERE name = "
        "'wsd-branches';"
        "INSERT INTO sweep_jobs SELECT sweep_id, 'late-trunk' FROM sweeps WHERE name = "
        "'wsd-branches';");
  }
  const auto compare = [&](const std::string& when) {
    auto old_rows = store->Query("SELECT * FROM (" + VersionSevenView() + ") ORDER BY 1, 2");
    auto new_rows = store->Query("SELECT * FROM job_results ORDER BY 1, 2");
    ASSERT_TRUE(old_rows.ok()) << old_rows.status();
    ASSERT_TRUE(new_rows.ok()) << new_rows.status();
    ASSERT_GT(old_rows->rows.size(), 40u);
    ExpectSameRows(*old_rows, *new_rows, when);
    for (const char* sweep : {"smoke", "baselines", "moe", "wsd-branches"}) {
      auto former = store->Query(FormerResultsRead(sweep));
      auto now = store->JobResults(sweep);
      ASSERT_TRUE(former.ok()) << former.status();
      ASSERT_TRUE(now.ok()) << now.status();
      ExpectSameRows(*former, *now, when + ", results of " + sweep);
      ExpectTypedRowsMatch(*now, store->JobResultRows(sweep), when + ", typed rows of " + sweep);
    }
  };
  compare("before any metric");

  // Every job that can be leased runs through the store's fenced path: a third
  // succeed, a third fail, and a third are preempted after a checkpoint at step
  // 5 and resume from it (the new lease trims their later rows), then succeed.
  ASSERT_TRUE(store->UpsertWorker("w", "host", 1, 0.0).ok());
  int leased = 0;
  while (true) {
    absl::StatusOr<std::optional<LeaseGrant>> lease = store->LeaseNextJob("w", 1, 0.0, 1e6);
    ASSERT_TRUE(lease.ok()) << lease.status();
    if (!lease->has_value()) break;
    const LeaseGrant g = **lease;
    const nlohmann::json config = nlohmann::json::parse(g.config_json);
    const int64_t steps = config.at("steps").get<int64_t>();
    const std::string family = config.at("family").get<std::string>();
    ASSERT_GE(steps, 8) << g.job_id;
    const int64_t last = std::min<int64_t>(steps, 23);
    if (g.attempt == 2) {  // the resumed one
      ASSERT_EQ(g.resume_step, 5);
      const absl::Status resumed = store->AppendFencedMetrics(
          g.job_id, g.fencing_token, Reports(g, family, 6, std::min<int64_t>(steps, 12)), 0.0);
      ASSERT_TRUE(resumed.ok()) << resumed;
      ASSERT_TRUE(
          store->EndAttempt(g.job_id, g.fencing_token, AttemptEnd::kSucceeded, steps, "done", 0.0)
              .ok());
      continue;
    }
    const absl::Status reported =
        store->AppendFencedMetrics(g.job_id, g.fencing_token, Reports(g, family, 1, last), 0.0);
    ASSERT_TRUE(reported.ok()) << reported;
    switch (leased++ % 3) {
      case 0:
        ASSERT_TRUE(
            store->EndAttempt(g.job_id, g.fencing_token, AttemptEnd::kSucceeded, steps, "done", 0.0)
                .ok());
        break;
      case 1:
        ASSERT_TRUE(
            store->EndAttempt(g.job_id, g.fencing_token, AttemptEnd::kFatalError, last, "boom", 0.0)
                .ok());
        break;
      default:
        ASSERT_TRUE(
            store->RecordCheckpoint(g.job_id, g.fencing_token, 5, CheckpointPath(g, 5), "c", 0.0)
                .ok());
        ASSERT_TRUE(store
                        ->EndAttempt(g.job_id, g.fencing_token, AttemptEnd::kPreempted, last,
                                     "preempted", 0.0)
                        .ok());
    }
  }
  ASSERT_GT(leased, 30);
  compare("after the store's writes");

  // Metrics written by another program, then the summary refreshed with the
  // statement schema/0009 documents for that.
  {
    RawDatabase raw(db.path());
    raw.Exec(
        "DELETE FROM metrics WHERE step > 12 AND name <> 'lr';"
        "UPDATE metrics SET value = value + 0.5 WHERE name = 'val_loss' AND step = 10;"
        "INSERT INTO metrics SELECT job_id, 'val_loss', 30, 2.5, 0, 0.0, 1, 0.0 FROM jobs "
        "WHERE family = 'dense';"
        "INSERT OR REPLACE INTO job_metric_summary SELECT * FROM job_metric_rollup;");
  }
  compare("after hand-written metrics and a refresh");
}

}  // namespace
}  // namespace xmod
