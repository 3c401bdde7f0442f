// The job table of a 10,000-job sweep, as `xmod results` and the dashboard's
// /api/jobs read it (SqliteStore::JobResults), before and after migration 9,
// side by side in one run on a real SQLite file:
//   old: the store's former statement over version 7's job_results view, which
//        parses each job's config JSON once per field it extracts and reads every
//        metric row of the job for last_step (through SqliteStore::Query, on the
//        store's own connection);
//   new: SqliteStore::JobResults as it is now.
// It also times the typed read of the same rows (SqliteStore::JobResultRows, what
// the reports, /api/compare and the law-driven order read), for information.
// The file holds bench/grid-10k.yaml with every job trained to step S (default
// 1,000): train_loss and lr every 10 steps, and every 100 steps an evaluation
// (val_loss and its standard error; the routed families add their causal values
// and capacities). The rows go straight into the metrics table with SQL, as
// bench/dashboard_render.mjs does, followed by the refresh of the metric summary
// that schema/0009 asks of such a writer. Rounds alternate old and new; prints
// each form's median and the median of the pairwise ratios old / new with their
// range (bench/paired_ratio.h). Both forms must give the same rows.
// Exits 1 when the new read's median is over 0.3 s or the rows differ.
// Usage: results_bench [--rounds R] [--steps S] [--keep] (--keep: leave the file)
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/paired_ratio.h"
#include "orchestrator/store/sqlite_store.h"
#include "schema/migrations.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

constexpr char kSweep[] = "grid-10k";
constexpr double kTargetSeconds = 0.3;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Version 7's SELECT of job_results, from the migration embedded in the binary.
std::string VersionSevenView() {
  const std::string& sql = SchemaMigrations().at(6).sql;
  const std::string head = "CREATE VIEW job_results AS";
  const size_t begin = sql.find(head) + head.size();
  return sql.substr(begin, sql.find(';', begin) - begin);
}

// SqliteStore::JobResults's statement before migration 9.
std::string FormerResultsRead() {
  return "SELECT r.*, CASE WHEN r.family = 'moe' THEN json_extract(j.config_json, '$.d_ff') / "
         "json_extract(j.config_json, '$.experts.width') END AS granularity FROM (" +
         VersionSevenView() + ") r JOIN jobs j ON j.job_id = r.job_id WHERE r.sweep = '" + kSweep +
         "' ORDER BY r.train_flops, r.job_id";
}

// Every job's metrics up to `steps`, in one transaction on a second connection.
bool WriteMetrics(const std::string& path, int steps) {
  const std::string s = std::to_string(steps);
  const std::string row =
      "SELECT j.job_id, n.name, s.step, 3.0 + 100.0 / (s.step + 10) + 0.01 * n.k, "
      "s.step * j.batch_tokens, s.step * j.batch_tokens * j.flops_per_token, 1, s.step FROM jobs "
      "j, s, ";
  const std::string sql =
      "BEGIN; WITH RECURSIVE s(step) AS (SELECT 10 UNION ALL SELECT step + 10 FROM s WHERE step "
      "< " +
      s + ") INSERT INTO metrics (job_id, name, step, value, tokens, flops, attempt, wall_time) " +
      row + "(SELECT 'train_loss' AS name, 0 AS k UNION ALL SELECT 'lr', 1) n UNION ALL " + row +
      "(SELECT 'val_loss' AS name, 2 AS k UNION ALL SELECT 'val_loss_se', 3) n "
      "WHERE s.step % 100 = 0 UNION ALL " +
      row +
      "(SELECT 'val_loss_causal' AS name, 4 AS k UNION ALL SELECT 'val_loss_causal_se', 5 "
      "UNION ALL SELECT 'val_capacity', 6 UNION ALL SELECT 'val_capacity_causal', 7 "
      "UNION ALL SELECT 'val_flops_ratio_causal', 8) n "
      "WHERE s.step % 100 = 0 AND j.family IN ('xmod', 'mod');"
      "UPDATE jobs SET status = 'succeeded', attempt = 1;"
      // What schema/0009 asks of a program that writes metrics itself.
      "INSERT OR REPLACE INTO job_metric_summary SELECT * FROM job_metric_rollup; COMMIT;";
  sqlite3* db = nullptr;
  bool ok = sqlite3_open(path.c_str(), &db) == SQLITE_OK;
  char* message = nullptr;
  ok = ok && sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK;
  if (!ok) std::fprintf(stderr, "writing metrics: %s\n", message ? message : sqlite3_errmsg(db));
  sqlite3_free(message);
  sqlite3_close(db);
  return ok;
}

int Main(int argc, char** argv) {
  int rounds = 5, steps = 1000;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const bool valued = i + 1 < argc;
    if (valued && !std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[++i]));
    if (valued && !std::strcmp(argv[i], "--steps")) steps = std::max(100, std::atoi(argv[++i]));
    keep |= !std::strcmp(argv[i], "--keep");
  }
  const std::string path = std::filesystem::temp_directory_path() /
                           ("xmod_results_bench_" + std::to_string(::getpid()) + ".db");
  const auto remove = [&] {
    if (keep) return;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  };
  remove();

  auto t0 = std::chrono::steady_clock::now();
  SqliteStore::Options options;
  options.path = path;
  options.durable = false;
  auto store = SqliteStore::Open(options);
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/bench/grid-10k.yaml");
  if (!store.ok() || !spec.ok()) {
    std::fprintf(stderr, "%s\n", (!store.ok() ? store.status() : spec.status()).ToString().c_str());
    return 1;
  }
  auto jobs = ExpandSweep(*spec);
  if (!jobs.ok() || !(*store)->SubmitSweep(*spec, *jobs).ok() || !WriteMetrics(path, steps)) {
    std::fprintf(stderr, "could not build the database\n");
    return 1;
  }
  auto metric_rows = (*store)->Query("SELECT COUNT(*) FROM metrics");
  std::printf(
      "database: %zu jobs, %lld metric rows, built in %.1f s (%s)\n", jobs->size(),
      metric_rows.ok() ? static_cast<long long>(std::get<int64_t>(metric_rows->rows[0][0])) : -1LL,
      Since(t0), path.c_str());

  const std::string former = FormerResultsRead();
  std::vector<double> t_old, t_new, t_typed;
  bool same = true;
  for (int r = 0; r < rounds; ++r) {
    t0 = std::chrono::steady_clock::now();
    absl::StatusOr<QueryResult> old_rows = (*store)->Query(former);
    t_old.push_back(Since(t0));
    t0 = std::chrono::steady_clock::now();
    absl::StatusOr<QueryResult> new_rows = (*store)->JobResults(kSweep);
    t_new.push_back(Since(t0));
    t0 = std::chrono::steady_clock::now();
    const bool typed = (*store)->JobResultRows(kSweep).ok();
    t_typed.push_back(Since(t0));
    same &= typed;
    if (!old_rows.ok() || !new_rows.ok()) {
      std::fprintf(stderr, "%s\n",
                   (!old_rows.ok() ? old_rows.status() : new_rows.status()).ToString().c_str());
      remove();
      return 1;
    }
    const bool equal = old_rows->columns == new_rows->columns && old_rows->rows == new_rows->rows;
    same &= equal;
    std::printf("round %d: old %.3f s, new %.3f s, %zu rows%s\n", r + 1, t_old.back(), t_new.back(),
                new_rows->rows.size(), equal ? "" : " (ROWS DIFFER)");
  }
  using bench::Median;
  const double median_new = Median(t_new);
  std::printf(
      "job table of a 10,000-job sweep: old %.3f s | new %.3f s (medians of %d rounds) | "
      "old / new %s\n",
      Median(t_old), median_new, rounds, bench::Paired(t_old, t_new).Text().c_str());
  std::printf("typed rows (JobResultRows): %.3f s (median)\n", Median(t_typed));
  std::printf("same rows: %s; new read under %.1f s: %s\n", same ? "yes" : "NO", kTargetSeconds,
              median_new <= kTargetSeconds ? "yes" : "NO");
  store->reset();
  remove();
  return same && median_new <= kTargetSeconds ? 0 : 1;
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) { return xmod::Main(argc, argv); }
