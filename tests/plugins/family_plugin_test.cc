// A family that lives in the tests only (echo_family.h), trained end to end
// through `xmod run`: the test builds of xmod and xmod-worker (echo-bin/) are
// xmod's own main files linked with the family's files, which register its rows
// at start-up; nothing in xmod's sources names it. The stock xmod refuses the
// same sweep, naming the families it knows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "orchestrator/store/sqlite_store.h"
#include "tests/paths/paths.h"
#include "tests/process.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

class FamilyPlugin : public testing::TempDirTest {
 protected:
  QueryResult Rows(const std::string& sql) {
    SqliteStore::Options options;
    options.path = Path("x.db");
    options.read_only = true;
    auto store = SqliteStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    auto rows = (*store)->Query(sql);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : QueryResult{};
  }
  std::string Sweep() const { return std::string(XMOD_SOURCE_DIR) + "/tests/plugins/echo.yaml"; }
};

TEST_F(FamilyPlugin, TheStockXmodRefusesTheUnknownFamilyAndItsSection) {
  const testing::CommandResult r = Command(XMOD_BIN, {"check", Sweep()});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(
      r.err,
      HasSubstr("family: unknown family 'echo' (known: dense, xmod, mod, moe, deco, mol, gdn)"));
  EXPECT_THAT(r.err, HasSubstr("echo: unknown key 'echo'"));
}

TEST_F(FamilyPlugin, ATestFamilyTrainsEndToEndThroughXmodRun) {
  const std::string bin = std::string(XMOD_ECHO_BIN_DIR) + "/xmod";
  testing::CommandResult r =
      Command(bin, {"run", Sweep(), "--db", Path("x.db"), "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 succeeded, 0 failed or cancelled, 0 unfinished"));
  // The job file carried the family's options object, and the worker trained it.
  const QueryResult jobs =
      Rows("SELECT family, status, config_json, steps FROM jobs ORDER BY family");
  ASSERT_EQ(jobs.rows.size(), 2u);
  EXPECT_EQ(std::get<std::string>(jobs.rows[1][0]), "echo");
  EXPECT_EQ(std::get<std::string>(jobs.rows[1][1]), "succeeded");
  const nlohmann::json config = nlohmann::json::parse(std::get<std::string>(jobs.rows[1][2]));
  EXPECT_EQ(config.at("echo").at("depth_factor").get<double>(), 4.0);
  EXPECT_EQ(config.at("family"), "echo");
  const QueryResult curve = Rows(
      "SELECT COUNT(*), MIN(m.value) FROM metrics m JOIN jobs j ON j.job_id = m.job_id "
      "WHERE j.family = 'echo' AND m.name = 'train_loss'");
  EXPECT_EQ(std::get<int64_t>(curve.rows[0][0]), std::get<int64_t>(jobs.rows[1][3]));
  EXPECT_LT(std::get<double>(curve.rows[0][1]), 4.16);  // below ln 64: it learned
  // The echo job and its dense twin differ only by the family and its object:
  // same shape, same budget, so the same FLOPs.
  const QueryResult flops = Rows("SELECT COUNT(DISTINCT flops_per_token) FROM jobs");
  EXPECT_EQ(std::get<int64_t>(flops.rows[0][0]), 1);
  // The test build reads its runs back as typed rows (grouped by configuration).
  // Its loss is the top-k validation loss (the family is not evaluated with
  // causal routing), so the configuration has a mean loss.
  r = Command(bin,
              {"results", "echo-run", "--db", Path("x.db"), "--by-config", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  bool seen = false;
  for (const nlohmann::json& row : nlohmann::json::parse(r.out)) {
    if (row.at("family") != "echo") continue;
    seen = true;
    EXPECT_TRUE(row.at("mean_loss").is_number()) << row.dump();
  }
  EXPECT_TRUE(seen) << r.out;
  // The stock xmod opens the database but refuses rows of a family it does not
  // know, naming the job and the family.
  r = Command(XMOD_BIN, {"results", "echo-run", "--db", Path("x.db"), "--by-config"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err,
              HasSubstr("unknown family 'echo' (known: dense, xmod, mod, moe, deco, mol, gdn)"));
}

}  // namespace
}  // namespace xmod
