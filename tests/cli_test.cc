// Runs the `xmod` binary as a user would and checks its exit codes, messages and
// what it leaves in the database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "orchestrator/store/sqlite_store.h"
#include "tests/fixtures.h"
#include "tests/paths/paths.h"
#include "tests/process.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

  static std::string LawGrid() {
    return std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/lawgrid.yaml";
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
  // The job bound: the smoke sweep's 8 jobs are over a limit of 7, and nothing is
  // written by a submit that is refused for it.
  CommandResult over = Xmod({"expand", Sweep("smoke"), "--max-jobs", "7"});
  EXPECT_EQ(over.code, 2);
  EXPECT_THAT(over.err, HasSubstr(": grid: the grid makes 8 jobs, more than the limit of 7"));
  EXPECT_EQ(Xmod({"submit", Sweep("smoke"), "--db", Path("capped.db"), "--max-jobs", "7"}).code, 2);
  EXPECT_FALSE(std::filesystem::exists(Path("capped.db")));
  EXPECT_EQ(Xmod({"expand", Sweep("smoke"), "--max-jobs", "8"}).code, 0);
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
  // One job: cancelled by id, found by --where, resumed by id.
  r = Xmod({"results", "smoke", "--db", db, "--columns", "job_id", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = r.out.substr(7, 16);  // the first id after the header "job_id\n"
  r = Xmod({"cancel", job, "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 jobs cancelled"));
  r = Xmod({"results", "smoke", "--db", db, "--where", "status = 'cancelled'", "--columns",
            "job_id,status", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "job_id,status\n" + job + ",cancelled\n");
  r = Xmod({"resume", job, "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("'" + job + "': 1 failed or cancelled jobs back to pending"));
  r = Xmod({"results", "smoke", "--db", db, "--where", "status <> 'pending'"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr(job)));
  r = Xmod({"resume", "0000000000000000", "--db", db});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no sweep or job named '0000000000000000'"));
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
  EXPECT_THAT(r.err, HasSubstr(Path("bad.csv") + ":3: D: not a finite number"));
}

// Finishes every job of `sweep` without training: each gets a short val_loss
// curve ending at the X-MoD law's value for its sizes (parameters below), times
// (1 + noise·N(0, 1)). The law is written out here again, independently of
// orchestrator/fit, so the fit is checked against a second reading of docs/laws.md.
struct LawTruth {
  double e = 1.5, a = 50.0, b = 80.0, alpha = 0.35, beta = 0.3;
  double eta = 0.4, c_t = 1.0, beta_t = 0.5, c_s = 0.05, psi = 0.8;
  double delta = 0.2, gamma = -0.01, omega = -0.5, zeta = -0.02;  // the MoE law's extras
  double coarse = 1.0;  // moe runs of granularity 2 read this factor higher
};

void FinishWithLawLosses(const std::string& db, const std::string& sweep, double noise,
                         uint64_t seed, const LawTruth& t = {}) {
  SqliteStore::Options options;
  options.path = db;
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto results = (*store)->JobResults(sweep);
  ASSERT_TRUE(results.ok()) << results.status();
  std::map<std::string, std::map<std::string, double>> jobs;  // id -> column -> number
  std::map<std::string, std::string> family;
  for (const auto& row : results->rows) {
    std::map<std::string, double> cols;
    std::string id;
    for (size_t i = 0; i < results->columns.size(); ++i) {
      if (const auto* v = std::get_if<int64_t>(&row[i]))
        cols[results->columns[i]] = static_cast<double>(*v);
      if (const auto* v = std::get_if<double>(&row[i])) cols[results->columns[i]] = *v;
      if (results->columns[i] == "job_id") id = std::get<std::string>(row[i]);
      if (results->columns[i] == "family") family[id] = std::get<std::string>(row[i]);
    }
    jobs[id] = cols;
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double now = 1.0e9;
  ASSERT_TRUE((*store)->UpsertWorker("w", "localhost", 1, now).ok());
  for (;;) {
    auto grant = (*store)->LeaseNextJob("w", 1, now, 60.0);
    ASSERT_TRUE(grant.ok()) << grant.status();
    if (!grant->has_value()) break;
    const std::string id = (*grant)->job_id;
    const auto& j = jobs.at(id);
    const double n_a = j.at("n_params_active"), n_t = j.at("n_params_total");
    // D is the tokens trained (whole steps of the batch); f_r the routed share of
    // the real layout, (L - ceil(L/s)) / L.
    const double d = j.at("tokens_trained"), context = j.at("context"), stride = j.at("stride");
    const double layers = j.at("n_layers");
    const double k = std::max(1.0, std::round(j.at("capacity") * context));
    const double rho = family.at(id) == "dense" ? 1.0 : k / context;
    const double n_eff = n_a * std::pow(n_t / n_a, t.eta);
    double loss = t.e + t.a / std::pow(n_eff, t.alpha) + t.b / std::pow(d, t.beta);
    if (family.at(id) == "moe") {
      // The MoE law at the expansion E/k, N the active parameters.
      const double x = j.at("experts") / j.at("top_k"), lx = std::log(x);
      loss = t.e + t.a * std::pow(x, t.delta) * std::pow(n_a, -(t.alpha - t.gamma * lx)) +
             t.b * std::pow(x, t.omega) * std::pow(d, -(t.beta - t.zeta * lx));
      if (j.at("top_k") == 2) loss *= t.coarse;  // the fixture's granularity-2 block
    }
    const bool routed = family.at(id) != "dense" && stride > 1;
    if (routed) {
      const double f_r = (layers - std::ceil(layers / stride)) / layers;
      loss += t.c_t * f_r * (std::pow(rho * context, -t.beta_t) - std::pow(context, -t.beta_t));
      loss += t.c_s * (1 - rho) * std::pow(stride - 1, t.psi);
    }
    if (family.at(id) == "mod") loss *= 1.01;  // not a point of either law
    loss *= 1.0 + noise * normal(rng);
    const int64_t steps = static_cast<int64_t>(j.at("steps"));
    // Routed runs: the law's loss is the causal one; the top-k loss reads 3% lower
    // (it sees future tokens), so a fit of the wrong metric would miss the truth.
    std::vector<MetricPoint> points;
    for (int64_t step : {steps / 2, steps}) {
      for (const char* name : {"val_loss", "val_loss_causal", "val_loss_se"}) {
        if (!routed && std::string(name) == "val_loss_causal") continue;
        MetricPoint p;
        p.job_id = id;
        p.name = name;
        p.step = step;
        const double causal = step == steps ? loss : loss * 1.1;
        p.value = std::string(name) == "val_loss_se"            ? 0.004 * causal
                  : (routed && std::string(name) == "val_loss") ? 0.97 * causal
                                                                : causal;
        p.tokens = static_cast<int64_t>(d * step / steps);
        p.flops = j.at("train_flops") * step / steps;
        p.attempt = (*grant)->attempt;
        points.push_back(p);
      }
    }
    ASSERT_TRUE((*store)->AppendFencedMetrics(id, (*grant)->fencing_token, points, now).ok());
    ASSERT_TRUE(
        (*store)
            ->EndAttempt(id, (*grant)->fencing_token, AttemptEnd::kSucceeded, steps, "", now)
            .ok());
  }
}

TEST_F(Cli, FitOfAFinishedSweepRecoversTheLawAndStoresIt) {
  const std::string db = Path("demo.db");
  ASSERT_EQ(Xmod({"submit", LawGrid(), "--db", db}).code, 0);
  // Nothing finished yet: a clear error, nothing stored.
  CommandResult r = Xmod({"fit", "lawgrid", "--db", db, "--law", "dense"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no succeeded dense or xmod job"));
  FinishWithLawLosses(db, "lawgrid", 0.0, 1);

  r = Xmod({"fit", "lawgrid", "--db", db, "--law", "xmod", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fit = nlohmann::json::parse(r.out);
  const LawTruth truth;
  EXPECT_EQ(fit["law"], "xmod");
  EXPECT_EQ(fit["method"], "two-stage");
  EXPECT_EQ(fit["n_points"], 24 + 96);  // MoD runs are not points of the law
  EXPECT_THAT(fit["metric"].get<std::string>(), HasSubstr("val_loss_causal for routed runs"));
  ASSERT_EQ(fit["dense"].size(), 2u);  // one dense reference per context
  EXPECT_EQ(fit["dense"][0]["context"], 64);
  EXPECT_EQ(fit["dense"][1]["context"], 128);
  EXPECT_NEAR(fit["noise"]["eval_se_relative"].get<double>(), 0.004, 1e-9);
  EXPECT_NEAR(fit["params"]["E"].get<double>(), truth.e, 0.01 * truth.e);
  EXPECT_NEAR(fit["params"]["alpha"].get<double>(), truth.alpha, 0.01);
  EXPECT_NEAR(fit["params"]["beta"].get<double>(), truth.beta, 0.01);
  EXPECT_NEAR(fit["params"]["eta"].get<double>(), truth.eta, 0.01);
  EXPECT_NEAR(fit["params"]["c_T"].get<double>(), truth.c_t, 0.05);
  EXPECT_NEAR(fit["params"]["beta_T"].get<double>(), truth.beta_t, 0.02);
  EXPECT_NEAR(fit["params"]["c_s"].get<double>(), truth.c_s, 0.005);
  EXPECT_NEAR(fit["params"]["psi"].get<double>(), truth.psi, 0.05);
  EXPECT_LT(fit["rmse"].get<double>(), 1e-4);

  // Stored with the hash of its points.
  SqliteStore::Options options;
  options.path = db;
  options.read_only = true;
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok());
  auto rows = (*store)->Query(
      "SELECT fit_id, law, points_hash, n_points, objective, "
      "json_extract(params_json, '$.eta') FROM fits");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(std::get<int64_t>(rows->rows[0][0]), fit["fit_id"].get<int64_t>());
  EXPECT_EQ(std::get<std::string>(rows->rows[0][1]), "xmod");
  EXPECT_EQ(std::get<std::string>(rows->rows[0][2]), fit["points_hash"].get<std::string>());
  EXPECT_EQ(std::get<int64_t>(rows->rows[0][3]), 120);
  EXPECT_DOUBLE_EQ(std::get<double>(rows->rows[0][5]), fit["params"]["eta"].get<double>());

  // Hold-out and intervals, as a table; then the dense law with its own hold-out.
  r = Xmod(
      {"fit", "lawgrid", "--db", db, "--law", "xmod", "--holdout-largest", "--bootstrap", "20"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2.5%"));
  EXPECT_THAT(r.out, HasSubstr("97.5%"));
  EXPECT_THAT(r.out, HasSubstr("held out: scale s4 (30 runs)"));
  EXPECT_THAT(r.out, HasSubstr("extras on the sparse runs"));
  EXPECT_THAT(r.out, HasSubstr("dense law at T = 64"));
  EXPECT_THAT(r.out, HasSubstr("resamples fitted"));
  EXPECT_THAT(r.out, HasSubstr("on a bound:"));
  r = Xmod(
      {"fit", "lawgrid", "--db", db, "--law", "dense", "--holdout-largest", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto dense = nlohmann::json::parse(r.out);
  EXPECT_EQ(dense["n_points"], 18);
  EXPECT_EQ(dense["method"], "per-context");
  EXPECT_EQ(dense["holdout"]["scale"], "s4");
  EXPECT_EQ(dense["holdout"]["points"].size(), 6u);
  EXPECT_LT(dense["holdout"]["rmse"].get<double>(), 1e-3);  // noiseless: the law extrapolates
  rows = (*store)->Query("SELECT method, COALESCE(holdout_scale, '-') FROM fits ORDER BY fit_id");
  ASSERT_EQ(rows->rows.size(), 3u);
  EXPECT_EQ(std::get<std::string>(rows->rows[0][0]), "two-stage");
  EXPECT_EQ(std::get<std::string>(rows->rows[0][1]), "-");  // every scale fitted
  EXPECT_EQ(std::get<std::string>(rows->rows[1][1]), "s4");
  EXPECT_EQ(std::get<std::string>(rows->rows[2][0]), "per-context");
  EXPECT_EQ(std::get<std::string>(rows->rows[2][1]), "s4");

  // The top-k metric reads the lower top-k losses: eta moves off the truth.
  r = Xmod(
      {"fit", "lawgrid", "--db", db, "--law", "xmod", "--metric", "val_loss", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(std::abs(nlohmann::json::parse(r.out)["params"]["eta"].get<double>() - truth.eta),
            0.02);
  // --fix freezes, one context takes the joint fit, --params total counts embeddings.
  r = Xmod({"fit", "lawgrid", "--db", db, "--law", "xmod", "--fix", "psi=0.8", "--fix",
            "beta_T=0.5", "--context", "128", "--joint", "--params", "total", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fixed = nlohmann::json::parse(r.out);
  EXPECT_EQ(fixed["params"]["psi"], 0.8);
  EXPECT_EQ(fixed["params"]["beta_T"], 0.5);
  EXPECT_EQ(fixed["method"], "joint");
  EXPECT_EQ(fixed["params_counted"], "total");

  // Bad requests: exit 2, nothing stored.
  EXPECT_EQ(Xmod({"fit", "nosuch", "--db", db}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--law", "chinchilla"}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--law", "dense", "--joint"}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--law", "xmod", "--joint"}).code,
            2);  // 2 contexts
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--fix", "psi"}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--law", "xmod", "--fix", "zeta=1"}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid", "--db", db, "--metric", "best"}).code, 2);
  EXPECT_EQ(Xmod({"fit", "lawgrid"}).code, 2);  // no --db
  r = Xmod({"fit", "lawgrid", "--db", Path("typo.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("typo.db: no such database"));
  EXPECT_FALSE(std::filesystem::exists(Path("typo.db")));
  rows = (*store)->Query("SELECT COUNT(*) FROM fits");
  EXPECT_EQ(std::get<int64_t>(rows->rows[0][0]), 5);
}

// xmod advise on the finished law grid: every configuration with its interval and
// P(best) (summing to one), both X-MoD forms with the sweep's design.fix applied,
// the unranked MoD runs named, and a budget outside the runs refused unless
// --extrapolate, which then says by how much.
TEST_F(Cli, AdviseRanksTheConfigurationsOfAFinishedSweep) {
  const std::string db = Path("advise.db");
  std::ifstream in(LawGrid());
  std::stringstream text;
  text << in.rdbuf();
  const std::string spec = Path("lawgrid-fixed.yaml");
  std::ofstream(spec) << text.str() << "  fix:\n    xmod: {psi: 0.8}\n";
  ASSERT_EQ(Xmod({"submit", spec, "--db", db}).code, 0);
  FinishWithLawLosses(db, "lawgrid", 0.002, 5);
  CommandResult r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e12", "--context", "128",
                          "--bootstrap", "20", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto advice = nlohmann::json::parse(r.out);
  ASSERT_EQ(advice["configurations"].size(), 5u);  // dense and the 2 x 2 X-MoD grid
  double total = 0;
  for (const auto& c : advice["configurations"]) {
    total += c["p_best"].get<double>();
    EXPECT_LE(c["loss_interval"][0].get<double>(), c["loss_interval"][1].get<double>());
    EXPECT_NEAR(6.0 * c["N_active"].get<double>() * c["D"].get<double>(), 1e12, 1e3);
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_GE(advice["refits"].get<int>(), 15);  // resamples that fitted, of 20
  EXPECT_LE(advice["refits"].get<int>(), 20);
  EXPECT_EQ(advice["fixed"]["xmod"]["psi"], 0.8);
  ASSERT_EQ(advice["forms"].size(), 2u);
  EXPECT_EQ(advice["forms"][0]["law"], "xmod");
  EXPECT_TRUE(advice["forms"][0]["fitted"].get<bool>());
  EXPECT_TRUE(advice["decision_holdout"]["available"].get<bool>());
  EXPECT_THAT(advice["notes"].dump(), HasSubstr("mod: "));
  EXPECT_FALSE(advice["verdict"].get<std::string>().empty());
  // As a table, with the frozen parameter named.
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e12", "--context", "64", "--bootstrap",
            "10"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("frozen in law xmod by the sweep's design.fix: psi=0.8"));
  EXPECT_THAT(r.out, HasSubstr("competing X-MoD forms"));
  EXPECT_THAT(r.out, HasSubstr("verdict: "));
  // Outside the runs: refused, then answered with --extrapolate.
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e16", "--context", "128"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("x the largest compute run"));
  EXPECT_THAT(r.err, HasSubstr("--extrapolate"));
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e16", "--context", "128",
            "--extrapolate", "--bootstrap", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("EXTRAPOLATING: C = 1e+16 FLOPs is"));
  // A context it did not run: refused, then answered from the dense-context law.
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e12", "--context", "256"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("T = 256 was not run (the sweep ran T = 64, 128; nearest 128, 2x"));
  EXPECT_THAT(r.err, HasSubstr("--extrapolate"));
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "1e12", "--context", "256",
            "--extrapolate", "--bootstrap", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("EXTRAPOLATING: T = 256 was not run"));
  EXPECT_THAT(r.out, HasSubstr("the dense reference's forms"));
  EXPECT_THAT(r.out, HasSubstr("reads its dense reference from this law (EXTRAPOLATED in T)"));
  r = Xmod({"advise", "lawgrid", "--db", db, "--compute", "0", "--context", "128"});
  EXPECT_EQ(r.code, 2);
}

// A moe-family sweep (tests/fixtures/moe_lawgrid.yaml) finished with losses from
// a known MoE law: xmod fit --law moe gives it back, one granularity at a time.
TEST_F(Cli, FitOfAMoeSweepRecoversTheMoeLawOneGranularityAtATime) {
  const std::string db = Path("moe.db");
  const std::string spec = std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/moe_lawgrid.yaml";
  ASSERT_EQ(Xmod({"submit", spec, "--db", db}).code, 0);
  CommandResult r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no succeeded dense or moe job"));
  LawTruth truth;
  truth.coarse = 0.97;  // the granularity-2 runs follow another law
  FinishWithLawLosses(db, "moelaw", 0.0, 1, truth);

  // Two granularities and a law without a granularity term: refused, listed.
  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("span granularities 1, 2"));
  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe", "--granularity", "4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--granularity 4: no finished MoE run"));
  EXPECT_EQ(Xmod({"fit", "moelaw", "--db", db, "--law", "dense", "--granularity", "1"}).code, 2);

  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe", "--granularity", "1", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["law"], "moe");
  EXPECT_EQ(fit["method"], "two-stage");
  EXPECT_EQ(fit["n_points"], 12 + 36);  // the dense runs and the granularity-1 MoE runs
  EXPECT_NEAR(fit["params"]["E"].get<double>(), truth.e, 1e-3 * truth.e);
  EXPECT_NEAR(fit["params"]["alpha"].get<double>(), truth.alpha, 1e-3);
  for (const auto& [name, value] : std::map<std::string, double>{{"delta", truth.delta},
                                                                 {"gamma", truth.gamma},
                                                                 {"omega", truth.omega},
                                                                 {"zeta", truth.zeta}}) {
    EXPECT_NEAR(fit["params"][name].get<double>(), value, 2e-3 * (1 + std::abs(value))) << name;
  }
  EXPECT_LT(fit["rmse"].get<double>(), 1e-5);
  // The other granularity is a different law: the fit is exact there too, with
  // other parameters.
  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe", "--granularity", "2", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto coarse = nlohmann::json::parse(r.out);
  EXPECT_GT(std::abs(coarse["params"]["delta"].get<double>() - truth.delta), 0.01);
  // The table says what it fitted; the fits are stored under law moe.
  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe", "--granularity", "1", "--bootstrap", "8"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("law moe (two-stage)"));
  EXPECT_THAT(r.out, HasSubstr("extras on the MoE runs"));
  EXPECT_THAT(r.out, HasSubstr("omega"));
  SqliteStore::Options options;
  options.path = db;
  options.read_only = true;
  auto store = SqliteStore::Open(options);
  ASSERT_TRUE(store.ok());
  auto rows = (*store)->Query("SELECT COUNT(*) FROM fits WHERE law = 'moe'");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(std::get<int64_t>(rows->rows[0][0]), 3);
  // An X-MoD parameter is not one of this law's.
  r = Xmod({"fit", "moelaw", "--db", db, "--law", "moe", "--granularity", "1", "--fix", "psi=1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("law moe has no parameter 'psi'"));
}

TEST_F(Cli, ResultsByConfigReportTheSeedSpreadAndAdviseCalibratesOnIt) {
  const std::string db = Path("demo.db");
  ASSERT_EQ(Xmod({"submit", Sweep("demo"), "--db", db}).code, 0);
  FinishWithLawLosses(db, "demo", 0.01, 4);
  CommandResult r = Xmod({"results", "demo", "--db", db, "--by-config", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  int replicated = 0;
  for (const auto& row : rows) {
    if (row["seeds"] == 2) {
      ++replicated;
      EXPECT_TRUE(row["family"] == "dense" || (row["family"] == "xmod" && row["scale"] == "s32"))
          << row;
      ASSERT_TRUE(row["seed_sd_pct"].is_number()) << row;
      EXPECT_GT(row["seed_sd_pct"].get<double>(), 0.0);
      EXPECT_LT(row["seed_sd_pct"].get<double>(), 5.0);
    }
  }
  // The demo's dense configurations and its X-MoD ones at s32, two seeds each.
  EXPECT_EQ(replicated, 9 + 4);
  EXPECT_EQ(rows.size(), 9u + 12u + 3u);  // + X-MoD elsewhere and MoD, one seed
  // The advice's calibration at this design (xmod advise --calibrate): two
  // simulated sweeps per truth, the pooled seed noise of the replicates above.
  r = Xmod({"advise", "demo", "--db", db, "--compute", "3e11", "--context", "128", "--bootstrap",
            "4", "--calibrate", "2", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto calibration = nlohmann::json::parse(r.out)["calibration"];
  ASSERT_EQ(calibration["cases"].size(), 2u) << calibration;
  EXPECT_EQ(calibration["cases"][0]["truth"], "law");
  EXPECT_EQ(calibration["cases"][1]["truth"], "law + misfit");
  for (const auto& c : calibration["cases"]) {
    EXPECT_EQ(c["sweeps"], 2);
    EXPECT_FALSE(c["truth_best"].get<std::string>().empty());
  }
  EXPECT_GT(calibration["noise"].get<double>(), 0.0);
  EXPECT_GE(calibration["cases"][1]["misfit_rms"].get<double>(),
            calibration["noise"].get<double>());  // at least the seed noise by default
  r = Xmod(
      {"advise", "demo", "--db", db, "--compute", "3e11", "--context", "128", "--calibrate", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--calibrate: at least 2 simulated sweeps"));
  r = Xmod(
      {"advise", "demo", "--db", db, "--compute", "3e11", "--context", "128", "--misfit", "0.01"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--misfit: only with --calibrate"));
  // The per-job view does not print the grouping key.
  r = Xmod({"results", "demo", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("config_key")));
  EXPECT_THAT(r.out, HasSubstr("tokens_trained"));
}

TEST_F(Cli, FitReadsAnXModCsvWithHoldOutAndNamesMissingColumns) {
  // Noiseless runs of the X-MoD law on a grid written out here (not the accounting's
  // sizes): N_total grows with stride and sparsity as in a FLOP-matched model.
  const double e = 1.69, a = 406.4, b = 410.7, alpha = 0.34, beta = 0.28;
  const double eta = 0.4, c_t = 1.0, beta_t = 0.5, c_s = 0.05, psi = 0.8;
  std::ofstream csv(Path("runs.csv"));
  csv.precision(17);
  csv << "scale,N_active,N_total,D,T,capacity,stride,loss\n";
  int scale = 0;
  for (double n : {1e7, 3e7, 1e8, 3e8}) {
    ++scale;
    for (double r : {5.0, 20.0}) {
      for (double t : {256.0, 1024.0}) {
        csv << "s" << scale << "," << n << "," << n << "," << r * n << "," << t << ",1,1,"
            << e + a / std::pow(n, alpha) + b / std::pow(r * n, beta) << "\n";
        for (double rho : {0.125, 0.5}) {
          for (double s : {2.0, 4.0}) {
            const double n_total = n * (1.0 + (s - 1.0) / s * (1.0 - rho) / rho * 0.5);
            const double loss =
                e + a / std::pow(n * std::pow(n_total / n, eta), alpha) +
                b / std::pow(r * n, beta) +
                c_t * (s - 1) / s * (std::pow(rho * t, -beta_t) - std::pow(t, -beta_t)) +
                c_s * (1 - rho) * std::pow(s - 1, psi);
            csv << "s" << scale << "," << n << "," << n_total << "," << r * n << "," << t << ","
                << rho << "," << s << "," << loss << "\n";
          }
        }
      }
    }
  }
  csv.close();
  CommandResult r = Xmod(
      {"fit", "--csv", Path("runs.csv"), "--law", "xmod", "--holdout-largest", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["holdout"]["scale"], "s4");
  EXPECT_EQ(fit["holdout"]["points"].size(), 20u);
  EXPECT_NEAR(fit["params"]["eta"].get<double>(), eta, 0.01);
  EXPECT_NEAR(fit["params"]["psi"].get<double>(), psi, 0.02);
  EXPECT_LT(fit["holdout"]["rmse"].get<double>(), 1e-3);
  // CSV output: one row per parameter, then the fit's figures.
  r = Xmod({"fit", "--csv", Path("runs.csv"), "--law", "xmod", "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name,value,low,high"));
  EXPECT_THAT(r.out, HasSubstr("\neta,"));
  // A dense-law CSV does not carry what the X-MoD law reads.
  std::ofstream(Path("dense.csv")) << "N,D,loss\n1e6,1e8,3.0\n";
  r = Xmod({"fit", "--csv", Path("dense.csv"), "--law", "xmod"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("dense.csv") + ":1: header: missing column 'N_total'"));
  std::ofstream(Path("cap.csv")) << "N_active,N_total,D,T,capacity,stride,loss\n"
                                    "1e6,2e6,1e8,256,1.5,2,3.0\n";
  r = Xmod({"fit", "--csv", Path("cap.csv"), "--law", "xmod"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("cap.csv") + ":2: capacity: must be in (0, 1]"));
  std::ofstream(Path("junk.csv")) << "N_active,N_total,D,T,capacity,stride,loss\n"
                                     "1e6,5e5,1e8,256,0.5,2,3.0\n"
                                     "1e6,2e6,1e8x,256,0.5,2,3.0\n";
  r = Xmod({"fit", "--csv", Path("junk.csv"), "--law", "xmod"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("junk.csv") + ":2: N_total: must be at least N_active"));
  std::ofstream(Path("junk.csv")) << "N_active,N_total,D,T,capacity,stride,loss\n"
                                     "1e6,2e6,1e8x,256,0.5,2,3.0\n";
  r = Xmod({"fit", "--csv", Path("junk.csv"), "--law", "xmod"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("junk.csv") + ":2: D: not a finite number"));
}

TEST_F(Cli, PlotWritesTheFivePlotsWithLabelsAndLegends) {
  const std::string db = Path("demo.db");
  ASSERT_EQ(Xmod({"submit", LawGrid(), "--db", db}).code, 0);
  FinishWithLawLosses(db, "lawgrid", 0.005, 2);
  const CommandResult r = Xmod({"plot", "lawgrid", "--db", db, "--out", Path("plots")});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::map<std::string, std::vector<std::string>> expected = {
      {"loss_vs_tokens",
       {"training tokens seen", "validation loss", "dense", "X-MoD ρ=0.125 s=4",
        "MoD (ρ=0.125, s=2)"}},
      {"loss_vs_flops",
       {"training FLOPs", "isoFLOP profiles", "non-embedding parameters",
        "dense law, N=", "lowest predicted loss"}},
      {"predicted_vs_observed",
       {"observed final validation loss", "predicted final validation loss", "held out: scale s4",
        "predicted = observed"}},
      {"xmod_vs_dense",
       {"sparsity", "relative to dense (%)", "X-MoD, stride s=2: mean",
        "X-MoD, stride s=4: each run", "MoD baseline"}},
      {"pairs",
       {"compute-matched pairs", "95% seed interval", "sparsity: skipped tokens (1 - capacity)",
        "X-MoD; matched: ", "MoD; matched: ", "stride s=4", "loss minus dense"}}};
  for (const auto& [name, texts] : expected) {
    const std::string path = Path("plots/" + name + ".svg");
    EXPECT_THAT(r.out, HasSubstr(path));
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(svg, HasSubstr("<svg")) << name;
    EXPECT_GT(svg.size(), 10000u) << name;  // drawn, not an empty frame
    for (const std::string& text : texts) EXPECT_THAT(svg, HasSubstr(text)) << name;
  }
  // A sweep with nothing finished has nothing to plot.
  ASSERT_EQ(Xmod({"submit", Sweep("smoke"), "--db", db}).code, 0);
  const CommandResult empty = Xmod({"plot", "smoke", "--db", db, "--out", Path("none")});
  EXPECT_EQ(empty.code, 2);
  EXPECT_THAT(empty.err, HasSubstr("no succeeded job"));
  EXPECT_FALSE(std::filesystem::exists(Path("none")));
}

TEST_F(Cli, RunRefusesRanksThatDoNotSplitTheBatch) {
  // Smoke jobs have 32 sequences per step; three ranks cannot share them.
  CommandResult r = Xmod({"run", Sweep("smoke"), "--db", Path("x.db"), "--ranks", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("do not split over 3 ranks"));
  EXPECT_FALSE(std::filesystem::exists(Path("x.db")));
}

// xmod plan on the finished law grid (dense and X-MoD): every configuration at
// every width with its best layout, the tokens its GPU-hours buy and its loss
// interval; the wall-clock and FLOPs-only optima; the plot drawn. Then the
// planner's file commands: predict, calibrate (written, then refused for another
// cluster with nothing written) and layout.
TEST_F(Cli, PlanRanksASweepsConfigurationsOnAClusterAndItsFileCommandsRefuseBadInput) {
  const std::string db = Path("plan.db");
  ASSERT_EQ(Xmod({"submit", LawGrid(), "--db", db}).code, 0);
  FinishWithLawLosses(db, "lawgrid", 0.002, 5);
  const std::string h100 = std::string(XMOD_SOURCE_DIR) + "/clusters/h100-sxm.yaml";
  const std::string svg = Path("plan.svg");
  CommandResult r = Xmod({"plan",        "lawgrid",  "--db",         db,    "--cluster", h100,
                          "--gpu-hours", "2000",     "--context",    "128", "--gpus",    "8",
                          "--widths",    "512,1024", "--bootstrap",  "10",  "--format",  "json",
                          "--plot",      svg,        "--extrapolate"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  ASSERT_EQ(plan["rows"].size(), 10u);  // 5 configurations x 2 widths
  for (const auto& row : plan["rows"]) {
    EXPECT_TRUE(row["fits"].get<bool>());
    EXPECT_LE(row["loss_low"].get<double>(), row["loss"].get<double>() + 1e-12);
    EXPECT_GE(row["loss_high"].get<double>(), row["loss"].get<double>() - 1e-12);
    EXPECT_NEAR(row["tokens"].get<double>(), row["tokens_per_s"].get<double>() * 2000 * 3600 / 8,
                1e-6 * row["tokens"].get<double>());
    EXPECT_GT(row["mfu"].get<double>(), 0.0);
  }
  EXPECT_FALSE(plan["best"].get<std::string>().empty());
  EXPECT_FALSE(plan["flops_only_best"].get<std::string>().empty());
  EXPECT_GT(plan["model_flops"].get<double>(), 0.0);
  std::ifstream drawn(svg);
  std::stringstream image;
  image << drawn.rdbuf();
  EXPECT_THAT(image.str(), HasSubstr("<svg"));
  EXPECT_THAT(image.str(), HasSubstr("FLOPs-only"));
  // Without --extrapolate a plan this far beyond the runs (d 32-64) is refused.
  r = Xmod({"plan", "lawgrid", "--db", db, "--cluster", h100, "--gpu-hours", "2000", "--context",
            "128", "--widths", "512", "--bootstrap", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("beyond the fitted runs"));
  r = Xmod({"plan", "lawgrid", "--db", db, "--cluster", h100, "--gpu-hours", "2000", "--context",
            "128", "--widths", "512", "--bootstrap", "0", "--extrapolate"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("EXTRAPOLATING: the candidates reach"));
  EXPECT_THAT(r.out, HasSubstr("wall-clock optimum: "));
  EXPECT_THAT(r.out, HasSubstr("FLOPs-only optimum: "));
  r = Xmod(
      {"plan", "lawgrid", "--db", db, "--cluster", h100, "--gpu-hours", "10", "--context", "96"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--context 96: sweep 'lawgrid' has no run at this context"));
  EXPECT_EQ(Xmod({"plan"}).code, 2);

  // On a fitted law (issue 34's MOSAIC check): points of a MoE law whose gains
  // grow with expansion (Ludziejewski et al.'s form, delta = -0.05), fitted with
  // the moe law; 64 H100s for 1,536 GPU-hours. A FLOPs budget picks the largest
  // expansion; the cluster does not, and says why.
  const std::string points = Path("moe_points.csv");
  {
    std::ofstream csv(points);
    csv << "N,D,loss,expansion,N_total,T\n";
    int k = 0;
    for (const double n : {2e8, 4e8, 8e8, 1.6e9, 3.2e9, 6.4e9}) {
      for (const double tpp : {5.0, 10.0, 20.0, 40.0}) {
        for (const double e : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0}) {
          const double d = n * tpp;
          double loss =
              406.4 * std::pow(e, -0.05) * std::pow(n, -0.34) + 410.7 * std::pow(d, -0.28) + 1.69;
          loss *= 1.0 + 0.002 * std::sin(1.7 * ++k);  // a little scatter
          csv << n << "," << d << "," << loss << "," << e << "," << n * (1 + 0.6 * (e - 1))
              << ",4096\n";
        }
      }
    }
  }
  r = Xmod({"plan",    "--csv",
            points,    "--law",
            "moe",     "--cluster",
            h100,      "--gpu-hours",
            "1536",    "--context",
            "4096",    "--gpus",
            "64",      "--global-batch-tokens",
            "2097152", "--widths",
            "4096",    "--bootstrap",
            "10",      "--format",
            "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto mosaic = nlohmann::json::parse(r.out);
  EXPECT_EQ(mosaic["flops_only_best"], "moe E/k=64 d=4096");
  EXPECT_NE(mosaic["best"], "moe E/k=64 d=4096");
  EXPECT_NE(mosaic["best"], "dense d=4096");
  EXPECT_THAT(mosaic["constraint"].get<std::string>(), HasSubstr("memory"));
  EXPECT_EQ(mosaic["extrapolation"], "");

  // predict: one line per configuration, in order.
  const std::string configs = Path("configs.csv");
  std::ofstream(configs)
      << "family,d_model,n_layers,n_heads,d_ff,mlp,vocab,seq_len,gpus,gpus_per_node,micro_batch,"
         "global_batch,tp,pp,dp,zero_stage,recompute,precision\n"
         "dense,4096,32,32,16384,gelu,50368,2048,64,8,4,1024,1,1,64,3,full,bf16\n"
         "dense,8192,80,64,32768,gelu,50368,2048,64,8,1,64,8,8,1,1,none,bf16\n";
  r = Xmod({"plan", "predict", "--cluster", h100, "--configs", configs, "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("row,tokens_per_s,mfu,hfu,step_s,memory_gb,fits"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3);
  // calibrate: written; another cluster's calibration refused.
  const std::string measured =
      std::string(XMOD_SOURCE_DIR) + "/tests/data/throughput/korthikanti2022_a100.csv";
  const std::string a100 = std::string(XMOD_SOURCE_DIR) + "/clusters/a100-80gb.yaml";
  const std::string cal = Path("cal.json");
  r = Xmod({"plan", "calibrate", "--cluster", a100, "--measured", measured, "--out", cal});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("calibrated a100-80gb on 8 runs"));
  r = Xmod({"plan", "predict", "--cluster", h100, "--calibration", cal, "--configs", configs});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("calibrated for cluster 'a100-80gb', not 'h100-sxm'"));
  // A measured file for predict, and a bad row for calibrate: refused, nothing written.
  r = Xmod({"plan", "predict", "--cluster", a100, "--configs", measured});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("'tokens_per_s' is a measurement"));
  const std::string bad = Path("bad.csv");
  std::ofstream(bad) << "family,d_model,n_layers,n_heads,d_ff,mlp,vocab,seq_len,gpus,gpus_per_"
                        "node,micro_batch,global_batch,tp,pp,dp,zero_stage,recompute,precision,"
                        "tokens_per_s\n"
                        "dense,4096,32,32,16384,gelu,50368,2048,64,8,4,1024,1,1,64,3,some,bf16,9\n";
  const std::string cal2 = Path("cal2.json");
  r = Xmod({"plan", "calibrate", "--cluster", a100, "--measured", bad, "--out", cal2});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad.csv:2: recompute: 'some' is not one of none, selective, full"));
  EXPECT_FALSE(std::filesystem::exists(cal2));
  // layout: the best and runners-up; nothing fits on one GPU for a 70B model.
  r = Xmod({"plan", "layout", "--cluster", h100, "--d-model", "4096", "--n-layers", "32",
            "--n-heads", "32", "--gpus", "64", "--global-batch", "512", "--top", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("best tp "));
  r = Xmod({"plan", "layout", "--cluster", h100, "--d-model", "8192", "--n-layers", "80",
            "--n-heads", "64", "--gpus", "1", "--global-batch", "8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no layout fits"));
}

TEST_F(Cli, EveryCommandHasHelpAndUsageErrorsExitTwo) {
  for (const char* command : {"expand", "submit", "status", "results", "curves", "sql", "resume",
                              "cancel", "serve", "run", "fit", "plot", "export"}) {
    const CommandResult r = Xmod({command, "--help"});
    EXPECT_EQ(r.code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("Usage")) << command;
  }
  const CommandResult version = Xmod({"--version"});
  EXPECT_EQ(version.code, 0) << version.err;
  EXPECT_THAT(version.out, ::testing::MatchesRegex(
                               "xmod [0-9.]+ \\(commit ([0-9a-f]{12}(-dirty)?|unknown), .+\\)\n"
                               "SQLite [0-9.]+, gRPC [0-9.]+, Protobuf [0-9.]+\n"));
  EXPECT_EQ(Xmod({}).code, 2);
  EXPECT_EQ(Xmod({"frobnicate"}).code, 2);
  EXPECT_EQ(Xmod({"submit", Sweep("smoke")}).code, 2);  // --db missing
  EXPECT_EQ(Xmod({"expand", Path("missing.yaml")}).code, 2);
}

// Output control, tags and comparison on two law grids that differ only in their
// learning rate (losses written as a law plus noise): --columns picks and orders,
// --where filters by SQL over the columns, the table hides cluster_key and prints
// times as dates; tags and a note persist; compare names the lr as the
// difference and matches every configuration.
TEST_F(Cli, ResultsColumnsWhereTagsAndCompare) {
  const std::string db = Path("grid.db");
  ASSERT_EQ(Xmod({"submit", LawGrid(), "--db", db}).code, 0);
  FinishWithLawLosses(db, "lawgrid", 0.002,
                      5);  // leases every job of the file: one sweep at a time
  {
    std::ifstream in(LawGrid());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find("name: lawgrid"), 13, "name: lawgrid-lr");
    text.replace(text.find("lr: 1.0e-2"), 10, "lr: 2.0e-2");
    std::ofstream(Path("lawgrid_lr.yaml")) << text;
  }
  ASSERT_EQ(Xmod({"submit", Path("lawgrid_lr.yaml"), "--db", db}).code, 0);
  FinishWithLawLosses(db, "lawgrid-lr", 0.002, 6);

  CommandResult r = Xmod({"results", "lawgrid", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("final_val_loss"));
  EXPECT_THAT(r.out, Not(HasSubstr("cluster_key")));
  r = Xmod({"results", "lawgrid", "--db", db, "--format", "csv"});
  EXPECT_THAT(r.out, HasSubstr("cluster_key"));  // machine formats keep every column
  r = Xmod({"results", "lawgrid", "--db", db, "--columns", "family,job_id,cluster_key", "--where",
            "family = 'dense' AND final_val_loss IS NOT NULL", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_GE(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.size(), 3u);
    EXPECT_EQ(row["family"], "dense");
    EXPECT_EQ(row.begin().key(), "cluster_key");  // nlohmann sorts keys; all three are there
  }
  r = Xmod({"results", "lawgrid", "--db", db, "--where", "family = 'dense'", "--by-config",
            "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const auto& row : nlohmann::json::parse(r.out)) EXPECT_EQ(row["family"], "dense");
  r = Xmod({"results", "lawgrid", "--db", db, "--where", "no_such_column = 1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--where: SQL error: no such column: no_such_column"));
  r = Xmod({"results", "lawgrid", "--db", db, "--where", "1); DELETE FROM jobs; SELECT (1"});
  EXPECT_EQ(r.code, 2);
  r = Xmod({"sql", "SELECT COUNT(*) AS n FROM jobs", "--db", db, "--format", "csv"});
  EXPECT_NE(r.out, "n\n0\n");
  r = Xmod({"results", "lawgrid", "--db", db, "--columns", "job_id,nope"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--columns: no column 'nope' (known: sweep, job_id,"));
  // Times: the sweeps' created_at as a UTC date in tables, seconds in CSV.
  r = Xmod({"sql", "SELECT 1764964800.5 AS created_at, 12.5 AS wall_time", "--db", db});
  EXPECT_THAT(r.out, HasSubstr("2025-12-05 20:00:00  12.5"));
  r = Xmod({"sql", "SELECT 1764964800.5 AS created_at", "--db", db, "--format", "csv"});
  EXPECT_EQ(r.out, "created_at\n1764964800.5\n");

  r = Xmod({"tag", "lawgrid", "--db", db, "--add", "baseline", "--add", "fig-3", "--note",
            "lr 0.01, the first grid"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Xmod({"tag", "lawgrid", "--db", db, "--remove", "fig-3"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Xmod({"tag", "lawgrid", "--db", db});
  EXPECT_EQ(r.out, "sweep 'lawgrid': tags: baseline\nnote: lr 0.01, the first grid\n");
  r = Xmod({"tag", "lawgrid", "--db", db, "--add", "two words"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("tag 'two words'"));
  r = Xmod({"tag", "nosuch", "--db", db, "--add", "x"});
  EXPECT_EQ(r.code, 2);
  r = Xmod({"sql", "SELECT s.name, t.tag FROM sweep_tags t JOIN sweeps s USING (sweep_id)", "--db",
            db, "--format", "csv"});
  EXPECT_EQ(r.out, "name,tag\nlawgrid,baseline\n");

  r = Xmod({"compare", "lawgrid", "lawgrid-lr", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("B differs from A in: lr: 0.01 -> 0.02"));
  r = Xmod({"results", "lawgrid", "--db", db, "--where", "status = 'succeeded'", "--format", "csv",
            "--columns", "job_id"});
  const auto finished = std::count(r.out.begin(), r.out.end(), '\n') - 1;
  EXPECT_THAT(r.out, Not(HasSubstr("nope")));
  r = Xmod({"compare", "lawgrid", "lawgrid-lr", "--db", db, "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto compared = nlohmann::json::parse(r.out);
  EXPECT_EQ(static_cast<int64_t>(compared.size()), finished);  // one seed per configuration
  for (const auto& row : compared) {
    EXPECT_NEAR(row["diff"].get<double>(),
                row["loss_b"].get<double>() - row["loss_a"].get<double>(), 1e-12);
    EXPECT_EQ(row["se_from"], "eval");
  }
  EXPECT_THAT(r.err, HasSubstr("shared configurations, 0 only in A, 0 only in B"));
}

}  // namespace
}  // namespace xmod
