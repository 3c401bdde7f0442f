#include "orchestrator/cli/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/token_data.h"
#include "orchestrator/cli/analysis_commands.h"
#include "orchestrator/cli/local_run.h"
#include "orchestrator/cli/output.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/service/client.h"
#include "orchestrator/service/server.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/design_check.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"
#include "proto/channel.h"

namespace xmod {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

// Everything the commands read from the command line.
struct Flags {
  std::string spec;
  std::string db;
  std::string format = "table";
  std::string sweep;
  std::string job;
  std::string target;
  std::string sql;
  PrepareOptions prepare;
  bool allow_unidentifiable = false;   // expand, check, submit: design errors become warnings
  int64_t max_jobs = kDefaultMaxJobs;  // expand, check, submit, serve: the sweep size bound
  bool by_config = false;              // results: one row per configuration (seeds together)
  std::ostream* err = nullptr;         // where design warnings go
  // Remote coordinator.
  std::string coordinator;
  std::string token_file;
  std::string tls_ca;
  bool watch = false;
  // serve
  std::string listen = "127.0.0.1:50051";
  std::string tls_cert, tls_key;
  bool insecure = false;
  double lease_ttl = 30.0;
  // run
  LocalRunOptions run;
  // fit, plot
  FitCommandOptions fit;
  PlotCommandOptions plot;
};

absl::StatusOr<std::unique_ptr<RemoteCoordinator>> Connect(const Flags& f) {
  std::string token;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(token, ReadTokenFile(f.token_file));
  }
  return RemoteCoordinator::Connect(f.coordinator, token, f.tls_ca);
}

absl::Status NeedDbOrCoordinator(const Flags& f) {
  if (f.db.empty() == f.coordinator.empty()) {
    return absl::InvalidArgumentError("give exactly one of --db FILE or --coordinator ADDR");
  }
  return absl::OkStatus();
}

std::atomic<bool> g_serve_stop{false};
void OnServeSignal(int) {
  g_serve_stop = true;
  InterruptLocalRun();
}

QueryResult ExpandTable(const std::vector<ResolvedJob>& jobs) {
  QueryResult t;
  t.columns = {
      "id",       "family",  "scale",          "sparsity",        "stride",          "context",
      "n_layers", "d_model", "n_params_total", "n_params_active", "flops_per_token", "flops_ratio",
      "tokens",   "steps",   "train_flops"};
  for (const ResolvedJob& j : jobs) {
    t.rows.push_back({j.id, std::string(FamilyName(j.shape.family)), j.scale, j.sparsity,
                      j.shape.stride, j.shape.context, j.shape.n_layers, j.shape.d_model,
                      j.n_params_total, j.n_params_active, j.flops_per_token, j.flops_ratio(),
                      j.tokens, j.steps, j.train_flops});
  }
  return t;
}

// Parses, expands and design-checks a sweep file: design errors refuse it (unless
// --allow-unidentifiable), warnings go to f.err.
absl::StatusOr<std::vector<ResolvedJob>> LoadAndExpand(const Flags& f, SweepSpec* spec_out) {
  ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepSpec(f.spec));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec, f.max_jobs));
  const DesignReport design = CheckDesign(spec, jobs);
  RETURN_IF_ERROR(DesignStatus(design, f.spec, f.allow_unidentifiable));
  if (f.err != nullptr) {
    for (const DesignFinding& d : design.findings) {
      *f.err << f.spec << ":" << d.line << ": " << d.field << ": "
             << (d.error ? "error (allowed): " : "warning: ") << d.message << "\n";
    }
  }
  if (spec_out != nullptr) *spec_out = std::move(spec);
  return jobs;
}

// xmod check: the design report, whole; exit 2 when it has errors.
absl::Status Check(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepSpec(f.spec));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec, f.max_jobs));
  const DesignReport design = CheckDesign(spec, jobs);
  double flops = 0;
  for (const ResolvedJob& j : jobs) flops += j.train_flops;
  out << fmt::format("sweep '{}': {} jobs, {:.3g} training FLOPs; laws checked: [{}]\n", spec.name,
                     jobs.size(), flops, fmt::join(design.laws, ", "));
  out << design.Text(f.spec);
  if (!design.ok() && !f.allow_unidentifiable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "design check failed for the laws [", absl::StrJoin(design.laws, ", "),
        "] (errors above; see docs/design-checks.md): fix the sweep, name fewer laws in "
        "design.laws, or pass --allow-unidentifiable"));
  }
  out << (design.ok() ? "design check passed\n" : "design check failed (allowed)\n");
  return absl::OkStatus();
}

absl::Status Expand(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, LoadAndExpand(f, nullptr));
  if (format == Format::kJson) {
    // The full resolved job: one element is what `xmod-train --job` reads.
    nlohmann::json array = nlohmann::json::array();
    for (const ResolvedJob& j : jobs) array.push_back(j.ToJson());
    out << array.dump(2) << "\n";
  } else {
    PrintResult(ExpandTable(jobs), format, out);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SqliteStore>> OpenStore(const std::string& path, bool read_only) {
  SqliteStore::Options options;
  options.path = path;
  options.read_only = read_only;
  return SqliteStore::Open(options);
}

absl::Status Submit(const Flags& f, std::ostream& out) {
  RETURN_IF_ERROR(NeedDbOrCoordinator(f));
  // Validated, expanded and design-checked here first, for the warnings and a
  // quick refusal before any connection (the scheduler checks again).
  SweepSpec spec;
  RETURN_IF_ERROR(LoadAndExpand(f, &spec).status());
  // Both ways end in Scheduler::Submit, the one submit path (with --db, a local
  // scheduler over the file).
  SubmitResult r;
  if (!f.coordinator.empty()) {
    ASSIGN_OR_RETURN(auto remote, Connect(f));
    ASSIGN_OR_RETURN(r, remote->Submit(spec.yaml_text, f.spec, f.allow_unidentifiable));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
    SystemClock clock;
    SchedulerOptions options;
    options.max_jobs = f.max_jobs;
    Scheduler scheduler(store.get(), &clock, options);
    ASSIGN_OR_RETURN(r, scheduler.Submit(spec.yaml_text, f.spec, f.allow_unidentifiable));
  }
  const int64_t present = r.jobs_in_spec - r.new_jobs;
  if (r.new_jobs == 0 && r.linked_jobs == 0 && !r.sweep_created) {
    out << fmt::format("sweep '{}': all {} jobs already submitted; nothing changed\n", spec.name,
                       r.jobs_in_spec);
  } else {
    out << fmt::format(
        "sweep '{}' {}: {} jobs in the spec, {} new, {} already present{}\n", spec.name,
        r.sweep_created ? "created" : "updated", r.jobs_in_spec, r.new_jobs, present,
        r.linked_jobs > 0 ? fmt::format(" ({} shared with other sweeps)", r.linked_jobs) : "");
  }
  return absl::OkStatus();
}

absl::Status StatusOnce(const Flags& f, Format format, std::ostream& out) {
  std::vector<SweepProgress> sweeps;
  std::vector<JobProgressRow> jobs;  // of the named sweep
  if (!f.coordinator.empty()) {
    ASSIGN_OR_RETURN(auto remote, Connect(f));
    ASSIGN_OR_RETURN(sweeps, remote->Status(f.sweep));
    if (!f.sweep.empty()) {
      ASSIGN_OR_RETURN(jobs, remote->ListJobs(f.sweep));
    }
  } else {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
    ASSIGN_OR_RETURN(std::vector<StateCounts> counts, store->CountStates(f.sweep));
    for (StateCounts& c : counts) {
      SweepProgress p;
      ASSIGN_OR_RETURN(std::vector<JobProgressRow> rows, store->JobProgress(c.sweep));
      const FlopProgress flops = SumProgress(rows);
      p.train_flops_total = flops.total;
      p.train_flops_done = flops.done;
      ASSIGN_OR_RETURN(p.started_at, store->SweepStartedAt(c.sweep));
      if (!f.sweep.empty()) jobs = std::move(rows);
      p.counts = std::move(c);
      sweeps.push_back(std::move(p));
    }
  }
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  QueryResult t;
  t.columns.push_back("sweep");
  for (JobState s : kAllJobStates) t.columns.emplace_back(JobStateName(s));
  for (const char* c : {"total", "progress", "elapsed_s", "eta_s"}) t.columns.push_back(c);
  for (const SweepProgress& p : sweeps) {
    std::vector<Value> row{p.counts.sweep};
    for (JobState s : kAllJobStates) row.emplace_back(p.counts.counts.at(s));
    row.emplace_back(p.counts.total);
    const FlopProgress flops{p.train_flops_done, p.train_flops_total};
    row.emplace_back(flops.Fraction());
    // ETA from the FLOP rate since the sweep's first attempt (progress.h).
    const double elapsed = p.started_at > 0 ? now - p.started_at : 0.0;
    row.emplace_back(elapsed);
    if (const std::optional<double> eta = EtaSeconds(flops, 0.0, elapsed)) {
      row.emplace_back(*eta);
    } else {
      row.emplace_back(std::monostate{});
    }
    t.rows.push_back(std::move(row));
  }
  PrintResult(t, format, out);
  // The named sweep's jobs in flight, with their progress.
  QueryResult running;
  running.columns = {"job_id",  "family", "scale",   "sparsity", "stride",
                     "context", "status", "attempt", "step",     "steps"};
  for (const JobProgressRow& j : jobs) {
    if (!j.in_flight()) continue;
    running.rows.push_back({j.job_id, j.family, j.scale, j.sparsity, j.stride, j.context, j.status,
                            j.attempt, j.step, j.steps});
  }
  if (!running.rows.empty() && format == Format::kTable) {
    out << "\n";
    PrintResult(running, format, out);
  }
  return absl::OkStatus();
}

absl::Status Status(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  RETURN_IF_ERROR(NeedDbOrCoordinator(f));
  if (!f.watch) return StatusOnce(f, format, out);
  std::signal(SIGINT, OnServeSignal);
  while (!g_serve_stop) {
    out << "\033[H\033[2J";
    RETURN_IF_ERROR(StatusOnce(f, format, out));
    out << std::flush;
    for (int i = 0; i < 20 && !g_serve_stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return absl::OkStatus();
}

absl::Status Serve(const Flags& f, std::ostream& out) {
  ServerOptions options;
  options.listen = f.listen;
  options.tls_cert = f.tls_cert;
  options.tls_key = f.tls_key;
  options.insecure = f.insecure;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(options.token, ReadTokenFile(f.token_file));
  }
  if (!(f.lease_ttl > 0)) return absl::InvalidArgumentError("--lease-ttl must be positive");
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
  SystemClock clock;
  SchedulerOptions scheduler_options;
  scheduler_options.lease_ttl_seconds = f.lease_ttl;
  scheduler_options.max_jobs = f.max_jobs;
  Scheduler scheduler(store.get(), &clock, scheduler_options);
  ASSIGN_OR_RETURN(auto server, CoordinatorServer::Start(&scheduler, options));
  out << "xmod serve: " << f.db << " on " << server->address() << " (lease TTL " << f.lease_ttl
      << " s" << (options.token.empty() ? ", no token" : ", token required")
      << (options.tls_cert.empty() ? "" : ", TLS") << ")" << std::endl;
  std::signal(SIGINT, OnServeSignal);
  std::signal(SIGTERM, OnServeSignal);
  while (!g_serve_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  out << "xmod serve: shutting down" << std::endl;
  server->Shutdown();
  return absl::OkStatus();
}

absl::Status Results(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  if (f.by_config) {
    ASSIGN_OR_RETURN(std::vector<SweepJob> jobs, LoadSweepJobs(store.get(), f.sweep));
    PrintResult(ReplicateTable(jobs), format, out);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(QueryResult rows, store->JobResults(f.sweep));
  // The configuration key is for grouping (--by-config), not for reading.
  for (size_t c = 0; c < rows.columns.size(); ++c) {
    if (rows.columns[c] != "config_key") continue;
    rows.columns.erase(rows.columns.begin() + static_cast<std::ptrdiff_t>(c));
    for (auto& row : rows.rows) row.erase(row.begin() + static_cast<std::ptrdiff_t>(c));
    break;
  }
  PrintResult(rows, format, out);
  return absl::OkStatus();
}

absl::Status Curves(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ASSIGN_OR_RETURN(QueryResult rows, store->JobCurve(f.job));
  PrintResult(rows, format, out);
  return absl::OkStatus();
}

absl::Status Sql(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ASSIGN_OR_RETURN(QueryResult rows, store->Query(f.sql));
  PrintResult(rows, format, out);
  return absl::OkStatus();
}

absl::Status Resume(const Flags& f, std::ostream& out) {
  RETURN_IF_ERROR(NeedDbOrCoordinator(f));
  int64_t moved = 0;
  if (!f.coordinator.empty()) {
    ASSIGN_OR_RETURN(auto remote, Connect(f));
    ASSIGN_OR_RETURN(moved, remote->Resume(f.sweep));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
    ASSIGN_OR_RETURN(moved, store->ResumeSweep(f.sweep));
  }
  out << fmt::format("sweep '{}': {} failed or cancelled jobs back to pending\n", f.sweep, moved);
  return absl::OkStatus();
}

absl::Status Cancel(const Flags& f, std::ostream& out) {
  RETURN_IF_ERROR(NeedDbOrCoordinator(f));
  int64_t moved = 0;
  if (!f.coordinator.empty()) {
    ASSIGN_OR_RETURN(auto remote, Connect(f));
    ASSIGN_OR_RETURN(moved, remote->Cancel(f.target));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
    ASSIGN_OR_RETURN(moved, store->Cancel(f.target));
  }
  out << fmt::format("'{}': {} jobs cancelled\n", f.target, moved);
  return absl::OkStatus();
}

absl::Status DataPrepare(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(TokenMeta meta, PrepareByteDataset(f.prepare));
  out << fmt::format("{}: {} train and {} validation tokens ({}, vocab {})\n", f.prepare.output_dir,
                     meta.train_tokens, meta.val_tokens, meta.tokenizer, meta.vocab_size);
  out << fmt::format("validation split: {}\n", meta.val_split);
  return absl::OkStatus();
}

absl::Status DataStats(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> ds, TokenDataset::Open(f.prepare.output_dir, 0));
  const TokenMeta& m = ds->meta();
  QueryResult t;
  t.columns = {"split", "tokens", "vocab_size", "tokenizer", "unigram_entropy_nats"};
  t.rows.push_back({std::string("train"), m.train_tokens, m.vocab_size, m.tokenizer,
                    UnigramEntropy(ds->train(), m.vocab_size)});
  t.rows.push_back({std::string("val"), m.val_tokens, m.vocab_size, m.tokenizer,
                    UnigramEntropy(ds->val(), m.vocab_size)});
  PrintResult(t, format, out);
  return absl::OkStatus();
}

}  // namespace

int RunXmod(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"xmod: scaling-law sweeps for sparse-depth (X-MoD) language models"};
  app.require_subcommand(1);
  Flags f;
  auto add_format = [&](CLI::App* cmd) {
    cmd->add_option("--format", f.format, "Output format: table, csv or json")
        ->capture_default_str();
  };
  auto add_db = [&](CLI::App* cmd) {
    cmd->add_option("--db", f.db, "SQLite database file")->required();
  };
  // Commands that work on a file or through a running coordinator.
  auto add_db_or_remote = [&](CLI::App* cmd) {
    cmd->add_option("--db", f.db, "SQLite database file");
    cmd->add_option("--coordinator", f.coordinator, "Coordinator address host:port");
    cmd->add_option("--token-file", f.token_file, "File holding the coordinator's bearer token");
    cmd->add_option("--tls-ca", f.tls_ca, "CA certificate (PEM) of a TLS coordinator");
  };

  auto* expand = app.add_subcommand("expand", "Resolve a sweep's grid into jobs without running");
  expand->add_option("spec", f.spec, "Sweep file (YAML)")->required();
  add_format(expand);
  auto add_max_jobs = [&](CLI::App* cmd, int64_t* target) {
    cmd->add_option("--max-jobs", *target, "Refuse a sweep that expands to more jobs than this")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  };
  auto add_allow = [&](CLI::App* cmd) {
    cmd->add_flag("--allow-unidentifiable", f.allow_unidentifiable,
                  "Accept a sweep whose design check fails (the errors are printed as warnings)");
    add_max_jobs(cmd, &f.max_jobs);
  };
  add_allow(expand);

  auto* check = app.add_subcommand(
      "check", "Can this sweep identify its laws? FLOP matching, layouts, budgets, replicates");
  check->add_option("spec", f.spec, "Sweep file (YAML)")->required();
  add_allow(check);

  auto* submit = app.add_subcommand("submit", "Validate, expand and record a sweep");
  submit->add_option("spec", f.spec, "Sweep file (YAML)")->required();
  add_allow(submit);
  add_db_or_remote(submit);

  auto* status = app.add_subcommand("status", "Jobs per state, for one sweep or all");
  status->add_option("sweep", f.sweep, "Sweep name (all sweeps when omitted)");
  status->add_flag("--watch", f.watch, "Refresh every two seconds until interrupted");
  add_db_or_remote(status);
  add_format(status);

  auto* results = app.add_subcommand("results", "One row per job: axes, sizes, status, losses");
  results->add_option("sweep", f.sweep, "Sweep name")->required();
  add_db(results);
  add_format(results);
  results->add_flag("--by-config", f.by_config,
                    "One row per configuration: seeds, mean loss, seed spread, evaluation SE");

  auto* curves = app.add_subcommand("curves", "One job's curve: step, tokens, FLOPs, metrics");
  curves->add_option("job", f.job, "Job id")->required();
  add_db(curves);
  add_format(curves);

  auto* sql = app.add_subcommand("sql", "Run one read-only SQL query on the database");
  sql->add_option("query", f.sql, "SQL statement (SELECT ...)")->required();
  add_db(sql);
  add_format(sql);

  auto* resume =
      app.add_subcommand("resume", "Move a sweep's failed and cancelled jobs to pending");
  resume->add_option("sweep", f.sweep, "Sweep name")->required();
  add_db_or_remote(resume);

  auto* cancel = app.add_subcommand("cancel", "Cancel a sweep's unfinished jobs, or one job");
  cancel->add_option("target", f.target, "Sweep name or job id")->required();
  add_db_or_remote(cancel);

  auto* serve = app.add_subcommand("serve", "Run the coordinator (gRPC) over a SQLite file");
  add_db(serve);
  serve->add_option("--listen", f.listen, "Address to listen on (port 0: any free port)")
      ->capture_default_str();
  serve->add_option("--token-file", f.token_file, "Require this bearer token in every call");
  serve->add_option("--tls-cert", f.tls_cert, "Server certificate (PEM)");
  serve->add_option("--tls-key", f.tls_key, "Server private key (PEM)");
  serve->add_flag("--insecure", f.insecure, "Allow a non-loopback address without a token");
  serve->add_option("--lease-ttl", f.lease_ttl, "Seconds a lease lasts without a heartbeat")
      ->capture_default_str();
  add_max_jobs(serve, &f.max_jobs);

  auto* fit = app.add_subcommand(
      "fit", "Fit a scaling law to a sweep's final losses (or to a CSV file) and store it");
  fit->add_option("sweep", f.fit.sweep, "Sweep name (with --db)");
  fit->add_option("--db", f.fit.db, "SQLite database file");
  fit->add_option("--csv", f.fit.csv,
                  "CSV file instead of a sweep: columns N,D,loss (dense) or "
                  "N_active,N_total,D,T,capacity,stride,loss (xmod), header row");
  fit->add_option("--law", f.fit.law, "Law to fit: dense or xmod")->capture_default_str();
  fit->add_flag("--joint", f.fit.joint,
                "xmod: refine all parameters together after the two stages");
  fit->add_flag("--holdout-largest", f.fit.holdout_largest,
                "Fit without the largest scale and predict it");
  fit->add_option("--bootstrap", f.fit.bootstrap, "Resamples for percentile intervals (0: none)")
      ->capture_default_str();
  fit->add_option("--seed", f.fit.seed, "Seed of the bootstrap resampling")->capture_default_str();
  fit->add_option("--exclude-top-loss", f.fit.exclude_top_loss, "Drop the K highest-loss points")
      ->capture_default_str();
  fit->add_option("--threads", f.fit.threads, "Threads (0: every core)")->capture_default_str();
  fit->add_option("--format", f.fit.format, "Output format: table, csv or json")
      ->capture_default_str();
  fit->add_option("--fix", f.fit.fix,
                  "Freeze a parameter: NAME=VALUE (E, A, B, alpha, beta, eta, c_T, beta_T, c_s, "
                  "psi), repeatable");
  fit->add_option("--metric", f.fit.metric,
                  "Loss fitted: auto (val_loss_causal for routed runs), val_loss, val_loss_causal")
      ->capture_default_str();
  fit->add_option("--params", f.fit.params,
                  "Parameter count N: non-embedding or total (with embedding and head)")
      ->capture_default_str();
  fit->add_option("--context", f.fit.context, "Fit only the runs at this context length T");

  auto* plot = app.add_subcommand("plot", "Draw a sweep's plots (gnuplot): curves, laws, ratios");
  plot->add_option("sweep", f.plot.sweep, "Sweep name")->required();
  plot->add_option("--db", f.plot.db, "SQLite database file")->required();
  plot->add_option("--out", f.plot.out_dir, "Folder to write the plots to")->required();
  plot->add_option("--image", f.plot.image, "Image format: svg or png")->capture_default_str();
  plot->add_option("--threads", f.plot.threads, "Threads for the fits (0: every core)");

  auto* run = app.add_subcommand(
      "run", "Run a sweep here: in-process coordinator, local worker groups, live progress");
  run->add_option("spec", f.run.spec_path, "Sweep file (YAML)")->required();
  run->add_option("--db", f.run.db, "SQLite database file (default: <sweep name>.db)");
  run->add_option("--groups", f.run.groups, "Worker groups")->capture_default_str();
  run->add_option("--ranks", f.run.ranks, "Ranks per group")->capture_default_str();
  run->add_option("--threads", f.run.threads, "LibTorch threads per rank (0: cores / ranks)");
  run->add_option("--run-dir", f.run.run_dir, "Checkpoints, metric logs and group logs")
      ->capture_default_str();
  run->add_option("--lease-ttl", f.run.lease_ttl_seconds, "Seconds a lease lasts")
      ->capture_default_str();
  run->add_flag("--allow-unidentifiable", f.run.allow_unidentifiable,
                "Run a sweep whose design check fails");
  add_max_jobs(run, &f.run.max_jobs);

  auto* data = app.add_subcommand("data", "Token datasets");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "Turn text files into byte-level tokens");
  prepare->add_option("--input", f.prepare.inputs, "Text files, concatenated in order")
      ->required()
      ->check(CLI::ExistingFile);
  prepare->add_option("--output", f.prepare.output_dir, "Dataset folder to write")->required();
  prepare->add_flag("--strip-tags", f.prepare.strip_tags,
                    "Turn Brown-corpus word/tag tokens into plain text");
  prepare
      ->add_option("--val-fraction", f.prepare.val_fraction,
                   "Fraction held out for validation: every round(1/F)-th document, interleaved")
      ->capture_default_str();

  auto* stats = data->add_subcommand("stats", "Token counts and unigram entropy of a dataset");
  stats->add_option("dir", f.prepare.output_dir, "Dataset folder")->required();
  add_format(stats);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    app.exit(e, out, err);
    return kExitUsage;
  }

  absl::Status result;
  std::string name;
  f.err = &err;
  if (expand->parsed()) {
    name = "expand";
    result = Expand(f, out);
  } else if (check->parsed()) {
    name = "check";
    result = Check(f, out);
  } else if (submit->parsed()) {
    name = "submit";
    result = Submit(f, out);
  } else if (status->parsed()) {
    name = "status";
    result = Status(f, out);
  } else if (results->parsed()) {
    name = "results";
    result = Results(f, out);
  } else if (curves->parsed()) {
    name = "curves";
    result = Curves(f, out);
  } else if (sql->parsed()) {
    name = "sql";
    result = Sql(f, out);
  } else if (resume->parsed()) {
    name = "resume";
    result = Resume(f, out);
  } else if (cancel->parsed()) {
    name = "cancel";
    result = Cancel(f, out);
  } else if (prepare->parsed()) {
    name = "data prepare";
    result = DataPrepare(f, out);
  } else if (stats->parsed()) {
    name = "data stats";
    result = DataStats(f, out);
  } else if (fit->parsed()) {
    name = "fit";
    result = RunFitCommand(f.fit, out);
  } else if (plot->parsed()) {
    name = "plot";
    result = RunPlotCommand(f.plot, out);
  } else if (serve->parsed()) {
    name = "serve";
    result = Serve(f, out);
  } else if (run->parsed()) {
    f.run.tty = ::isatty(STDOUT_FILENO);
    std::signal(SIGINT, OnServeSignal);
    std::signal(SIGTERM, OnServeSignal);
    return RunLocalSweep(f.run, out, err);
  }
  if (!result.ok()) {
    err << result.message() << "\n";
    err << "xmod " << name << ": "
        << (ExitCodeFor(result) == kExitUsage ? "invalid input" : "failed")
        << (name == "plot" ? "\n" : "; nothing was written\n");
  }
  return ExitCodeFor(result);
}

}  // namespace xmod
