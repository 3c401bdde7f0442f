// Runs the `xmod` binary as a user would and checks its exit codes, messages and
// what it leaves in the database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "orchestrator/store/sqlite_store.h"
#include "tests/fixtures.h"
#include "tests/process.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

using testing::CommandResult;

class Cli : public testing::TempDirTest {
 protected:
  CommandResult Xmod(const std::vector<std::string>& args) { return Command(XMOD_BIN, args); }

  // Every row of every table, read through a read-only store.
  std::string Dump(const std::string& db) {
    SqliteStore::Options options;
    options.path = db;
    options.read_only = true;
    auto store = SqliteStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    std::string out;
    for (const char* table : {"sweeps", "jobs", "sweep_jobs", "metrics", "attempts"}) {
      auto rows = (*store)->Query(std::string("SELECT * FROM ") + table + " ORDER BY 1, 2");
      EXPECT_TRUE(rows.ok()) << rows.status();
      out += std::string(table) + ":" + std::to_string(rows->rows.size()) + ";";
      for (const auto& row : rows->rows) {
        for (const Value& v : row) {
          if (const auto* s = std::get_if<std::string>(&v)) out += *s;
          if (const auto* i = std::get_if<int64_t>(&v)) out += std::to_string(*i);
          if (const auto* d = std::get_if<double>(&v)) out += std::to_string(*d);
          out += "|";
        }
      }
    }
    return out;
  }

  static std::string Sweep(const std::string& name) {
    return std::string(XMOD_SOURCE_DIR) + "/sweeps/" + name + ".yaml";
  }
};

class CliMalformedSpec : public Cli, public ::testing::WithParamInterface<std::string> {};

TEST_P(CliMalformedSpec, SubmitExitsTwoNamingTheLineAndLeavesTheDatabaseUntouched) {
  const std::string db = Path("sweeps.db");
  ASSERT_EQ(Xmod({"submit", Sweep("smoke"), "--db", db}).code, 0);
  const std::string before = Dump(db);
  const std::string bad = testing::FixturePath("bad/" + GetParam() + ".yaml");
  const CommandResult r = Xmod({"submit", bad, "--db", db});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(bad + ":" + testing::ExpectedError(bad)));
  EXPECT_EQ(Dump(db), before);
  // Against a database that does not exist yet, no file is created.
  const CommandResult fresh = Xmod({"submit", bad, "--db", Path("new.db")});
  EXPECT_EQ(fresh.code, 2);
  EXPECT_FALSE(std::filesystem::exists(Path("new.db")));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CliMalformedSpec, ::testing::ValuesIn(testing::BadSpecNames()),
                         [](const auto& info) { return info.param; });

TEST_F(Cli, ExpandJsonOfTheClusterSweepIsStableAndComplete) {
  const CommandResult a = Xmod({"expand", Sweep("xmod-cluster"), "--format", "json"});
  const CommandResult b = Xmod({"expand", Sweep("xmod-cluster"), "--format", "json"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto jobs = nlohmann::json::parse(a.out);
  ASSERT_GT(jobs.size(), 100u);
  for (const auto& j : jobs) {
    for (const char* key : {"id", "family", "scale", "sparsity", "stride", "context", "n_layers",
                            "d_model", "n_params_total", "n_params_active", "flops_per_token",
                            "tokens", "steps", "train_flops", "flops_ratio"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
  }
}

TEST_F(Cli, ExpandPrintsTableAndCsv) {
  const CommandResult table = Xmod({"expand", Sweep("smoke")});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("flops_ratio"));
  const CommandResult csv = Xmod({"expand", Sweep("smoke"), "--format", "csv"});
  ASSERT_EQ(csv.code, 0);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 9);  // header + 8 jobs
  EXPECT_EQ(Xmod({"expand", Sweep("smoke"), "--format", "xml"}).code, 2);
}

TEST_F(Cli, SubmitTwiceChangesNothingAndAWiderGridSaysWhatItAdded) {
  const std::string db = Path("sweeps.db");
  CommandResult r = Xmod({"submit", Sweep("smoke"), "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 new"));
  const std::string before = Dump(db);
  r = Xmod({"submit", Sweep("smoke"), "--db", db});
  ASSERT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("nothing changed"));
  EXPECT_EQ(Dump(db), before);

  std::string wider = testing::Slurp(Sweep("smoke"));
  const std::string from = "stride: [2]";
  wider.replace(wider.find(from), from.size(), "stride: [2, 4]");
  std::ofstream(Path("wider.yaml")) << wider;
  r = Xmod({"submit", Path("wider.yaml"), "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("12 jobs in the spec, 4 new, 8 already present"));
}

TEST_F(Cli, StatusResultsAndCurvesReadTheDatabase) {
  const std::string db = Path("sweeps.db");
  ASSERT_EQ(Xmod({"submit", Sweep("smoke"), "--db", db}).code, 0);
  CommandResult r = Xmod({"status", "--db", db, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto status = nlohmann::json::parse(r.out);
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0]["pending"], 8);
  EXPECT_EQ(status[0]["total"], 8);
  EXPECT_EQ(status[0]["progress"], 0.0);
  EXPECT_TRUE(status[0]["eta_s"].is_null());  // nothing has started
  r = Xmod({"results", "smoke", "--db", db, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto results = nlohmann::json::parse(r.out);
  ASSERT_EQ(results.size(), 8u);
  EXPECT_TRUE(results[0]["final_val_loss"].is_null());  // until the job runs
  EXPECT_EQ(results[0]["status"], "pending");
  EXPECT_EQ(Xmod({"results", "nope", "--db", db}).code, 2);
  EXPECT_EQ(Xmod({"status", "--db", Path("missing.db")}).code, 2);
  const std::string id = results[0]["job_id"];
  r = Xmod({"curves", id, "--db", db, "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job_id,step,tokens,flops,train_loss,val_loss"));
}

TEST_F(Cli, SqlIsReadOnly) {
  const std::string db = Path("sweeps.db");
  ASSERT_EQ(Xmod({"submit", Sweep("smoke"), "--db", db}).code, 0);
  const std::string before = Dump(db);
  CommandResult r = Xmod({"sql", "--db", db, "DELETE FROM jobs"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("read-only"));
  EXPECT_EQ(Dump(db), before);
  r = Xmod({"sql", "--db", db, "SELECT COUNT(*) AS n FROM jobs", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "n\n8\n");
}

TEST_F(Cli, CancelAndResumeMoveJobs) {
  const std::string db = Path("sweeps.db");
  ASSERT_EQ(Xmod({"submit", Sweep("smoke"), "--db", db}).code, 0);
  CommandResult r = Xmod({"cancel", "smoke", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 jobs cancelled"));
  r = Xmod({"resume", "smoke", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 failed or cancelled jobs back to pending"));
}

TEST_F(Cli, FitReadsACsvAndPrintsTheDenseLawAsJson) {
  std::ofstream csv(Path("points.csv"));
  csv.precision(17);
  csv << "N,D,loss\n";
  for (double n : {1e6, 1e7, 1e8, 1e9, 1e10}) {
    for (double r : {5.0, 20.0, 80.0}) {
      csv << n << "," << r * n << ","
          << 1.7 + 400.0 / std::pow(n, 0.33) + 900.0 / std::pow(r * n, 0.3) << "\n";
    }
  }
  csv << "1e9,1e10,9.0\n";  // an outlier, dropped by --exclude-top-loss 1
  csv.close();
  CommandResult r = Xmod({"fit", "--csv", Path("points.csv"), "--law", "dense",
                          "--exclude-top-loss", "1", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["law"], "dense");
  EXPECT_EQ(fit["n_points"], 15);
  EXPECT_NEAR(fit["params"]["E"].get<double>(), 1.7, 1e-3);
  EXPECT_NEAR(fit["params"]["alpha"].get<double>(), 0.33, 1e-3);
  EXPECT_TRUE(fit.contains("objective") && fit.contains("rmse"));
  std::ofstream(Path("bad.csv")) << "N,D,loss\n1e6,1e8,3.0\n2e6,abc,2.9\n";
  r = Xmod({"fit", "--csv", Path("bad.csv")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("bad.csv") + ":3: D: not a number"));
}

TEST_F(Cli, RunRefusesRanksThatDoNotSplitTheBatch) {
  // Smoke jobs have 32 sequences per step; three ranks cannot share them.
  CommandResult r = Xmod({"run", Sweep("smoke"), "--db", Path("x.db"), "--ranks", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("do not split over 3 ranks"));
  EXPECT_FALSE(std::filesystem::exists(Path("x.db")));
}

TEST_F(Cli, EveryCommandHasHelpAndUsageErrorsExitTwo) {
  for (const char* command :
       {"expand", "submit", "status", "results", "curves", "sql", "resume", "cancel", "serve",
        "run", "fit"}) {
    const CommandResult r = Xmod({command, "--help"});
    EXPECT_EQ(r.code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("Usage")) << command;
  }
  EXPECT_EQ(Xmod({}).code, 2);
  EXPECT_EQ(Xmod({"frobnicate"}).code, 2);
  EXPECT_EQ(Xmod({"submit", Sweep("smoke")}).code, 2);  // --db missing
  EXPECT_EQ(Xmod({"expand", Path("missing.yaml")}).code, 2);
}

}  // namespace
}  // namespace xmod
