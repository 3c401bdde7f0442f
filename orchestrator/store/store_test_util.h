// Helpers shared by the store's tests: sweeps read from the project's files and
// expanded, and a dump of the committed content to compare before and after.
#ifndef XMOD_ORCHESTRATOR_STORE_STORE_TEST_UTIL_H_
#define XMOD_ORCHESTRATOR_STORE_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/clock.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/expand.h"
#include "tests/paths/paths.h"

namespace xmod::store_test {

// The text of a file of the source tree (path relative to its root).
inline std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A real database file for the running test, named after it in the temp folder,
// on `clock`; removed (with its WAL files) when this goes.
class TempDatabase {
 public:
  explicit TempDatabase(Clock* clock) {
    path_ = std::filesystem::temp_directory_path() /
            ("xmod_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db");
    Remove();
    SqliteStore::Options o;
    o.path = path_.string();
    o.clock = clock;
    auto opened = SqliteStore::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (opened.ok()) store_ = *std::move(opened);
  }
  ~TempDatabase() {
    store_.reset();
    Remove();
  }
  SqliteStore* store() { return store_.get(); }
  std::string path() const { return path_.string(); }
  // Closes the file first (for code that must outlive the store the other way round).
  void Close() { store_.reset(); }

 private:
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(path_.string() + suffix);
    }
  }
  std::filesystem::path path_;
  std::unique_ptr<SqliteStore> store_;
};

// A sweep file of the source tree (path relative to its root), parsed.
inline SweepSpec LoadSpec(const std::string& relative) {
  auto spec = LoadSweepSpec(std::string(XMOD_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : SweepSpec{};
}

inline std::vector<ResolvedJob> Expand(const SweepSpec& spec) {
  auto jobs = ExpandSweep(spec);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return jobs.ok() ? *jobs : std::vector<ResolvedJob>{};
}

// Every row of every table, as text: two equal dumps mean an untouched database.
inline std::string Dump(SqliteStore& store) {
  std::ostringstream out;
  for (const char* table :
       {"sweeps", "jobs", "sweep_jobs", "attempts", "metrics", "checkpoints", "workers", "fits"}) {
    auto rows = store.Query(std::string("SELECT * FROM ") + table + " ORDER BY 1, 2");
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return "";
    out << table << ":" << rows->rows.size() << "\n";
    for (const auto& row : rows->rows) {
      for (const Value& v : row) {
        std::visit(
            [&](const auto& x) {
              if constexpr (!std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) out << x;
            },
            v);
        out << "|";
      }
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace xmod::store_test

#endif  // XMOD_ORCHESTRATOR_STORE_STORE_TEST_UTIL_H_
