// A coordinator and worker groups on loopback, for the tests that run the
// distributed system end to end: `xmod serve` over a SQLite file in the test's
// folder, groups started with `mpirun`, and read-only queries of the file while
// they run. Every process started is killed at the end of the test.
#ifndef XMOD_TESTS_CLUSTER_H_
#define XMOD_TESTS_CLUSTER_H_

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/launch/local_run.h"
#include "orchestrator/store/sqlite_store.h"
#include "tests/paths/paths.h"
#include "tests/process.h"

namespace xmod::testing {

class ClusterTest : public TempDirTest {
 protected:
  void TearDown() override {
    for (pid_t p : spawned_) {
      SignalTree(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    TempDirTest::TearDown();
  }

  std::string Fixture(const std::string& name) {
    return std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/" + name;
  }

  pid_t Serve(int port, double ttl, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {XMOD_BIN,      "serve",
                                     "--db",        Path("x.db"),
                                     "--listen",    "127.0.0.1:" + std::to_string(port),
                                     "--lease-ttl", std::to_string(ttl)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const pid_t pid = SpawnGroup(argv, Path("serve.log"));
    spawned_.push_back(pid);
    EXPECT_TRUE(WaitUntil(
        [&] { return Slurp(Path("serve.log")).find("xmod serve:") != std::string::npos; }, 30))
        << Slurp(Path("serve.log"));
    return pid;
  }

  // A worker group named `name` (its worker id starts with "name-"), logging to name.log.
  pid_t Group(int port, int ranks, const std::string& name,
              const std::vector<std::string>& extra = {}) {
    // Port 0: no --coordinator (the caller passes --coordinator-file).
    std::vector<std::string> argv = {MPIEXEC,
                                     "-np",
                                     std::to_string(ranks),
                                     "--allow-run-as-root",
                                     "--oversubscribe",
                                     XMOD_WORKER_BIN,
                                     "--run-dir",
                                     Path("runs"),
                                     "--threads",
                                     "1",
                                     "--name",
                                     name,
                                     "--poll-seconds",
                                     "0.2"};
    if (port > 0) {
      argv.push_back("--coordinator");
      argv.push_back("127.0.0.1:" + std::to_string(port));
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    const pid_t pid = SpawnGroup(argv, Path(name + ".log"));
    spawned_.push_back(pid);
    return pid;
  }

  void Submit(int port, const std::string& spec) {
    CommandResult r =
        Command(XMOD_BIN, {"submit", spec, "--coordinator", "127.0.0.1:" + std::to_string(port)});
    ASSERT_EQ(r.code, 0) << r.err;
  }

  // Rows of one query on a read-only connection (the coordinator keeps writing).
  std::vector<std::vector<Value>> Rows(const std::string& sql, const std::string& db = "x.db") {
    SqliteStore::Options o;
    o.path = Path(db);
    o.read_only = true;
    auto store = SqliteStore::Open(o);
    if (!store.ok()) return {};
    auto rows = (*store)->Query(sql);
    return rows.ok() ? rows->rows : std::vector<std::vector<Value>>{};
  }

  int64_t Count(const std::string& sql, const std::string& db = "x.db") {
    auto rows = Rows(sql, db);
    if (rows.empty() || !std::holds_alternative<int64_t>(rows[0][0])) return -1;  // NULL
    return std::get<int64_t>(rows[0][0]);
  }

  // Every job's train_loss holds each step 1..steps exactly once, and val_loss its
  // evaluation steps; the primary key rules out doubles, this rules out gaps.
  // A cooldown branch's curve starts after its trunk's step start_step.
  void ExpectCompleteCurves() {
    for (const auto& row : Rows("SELECT job_id, steps, start_step FROM jobs")) {
      const std::string id = std::get<std::string>(row[0]);
      const int64_t steps = std::get<int64_t>(row[1]);
      const int64_t start = std::get<int64_t>(row[2]);
      EXPECT_EQ(
          Count("SELECT COUNT(*) FROM metrics WHERE name = 'train_loss' AND job_id = '" + id + "'"),
          steps - start)
          << id;
      EXPECT_EQ(Count("SELECT COUNT(DISTINCT step) FROM metrics WHERE name = 'train_loss' AND "
                      "step BETWEEN " +
                      std::to_string(start + 1) + " AND " + std::to_string(steps) +
                      " AND job_id = '" + id + "'"),
                steps - start)
          << id;
      EXPECT_EQ(Count("SELECT COUNT(*) FROM metrics WHERE name = 'val_loss' AND step = " +
                      std::to_string(steps) + " AND job_id = '" + id + "'"),
                1)
          << id;
    }
  }

  // Every metric of a job as (name, step) -> value, from a metrics.jsonl file.
  static std::map<std::pair<std::string, int64_t>, double> ReadMetricsLog(const std::string& path) {
    std::map<std::pair<std::string, int64_t>, double> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      out[{j["name"].get<std::string>(), j["step"].get<int64_t>()}] = j["value"].get<double>();
    }
    return out;
  }

  // Every metric of a job as the database holds it.
  std::map<std::pair<std::string, int64_t>, double> StoredMetrics(const std::string& job_id) {
    std::map<std::pair<std::string, int64_t>, double> out;
    for (const auto& row :
         Rows("SELECT name, step, value FROM metrics WHERE job_id = '" + job_id + "'")) {
      out[{std::get<std::string>(row[0]), std::get<int64_t>(row[1])}] = std::get<double>(row[2]);
    }
    return out;
  }

  std::vector<pid_t> spawned_;
};

// The pid of rank `rank` among the descendants of a group started by mpirun.
inline pid_t RankPid(pid_t group, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (pid_t p : ProcessTree(group)) {
    std::ifstream env("/proc/" + std::to_string(p) + "/environ");
    std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    for (size_t at = 0; at < all.size();) {
      const size_t end = all.find('\0', at);
      if (all.compare(at, end == std::string::npos ? std::string::npos : end - at, want) == 0) {
        return p;
      }
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return -1;
}

}  // namespace xmod::testing

#endif  // XMOD_TESTS_CLUSTER_H_
