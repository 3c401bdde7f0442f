// Helpers shared by the store's tests: sweeps read from the project's files and
// expanded, and a dump of the committed content to compare before and after.
#ifndef XMOD_ORCHESTRATOR_STORE_STORE_TEST_UTIL_H_
#define XMOD_ORCHESTRATOR_STORE_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/expand.h"

namespace xmod::store_test {

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
