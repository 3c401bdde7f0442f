#include "orchestrator/cli/commands.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/token_data.h"
#include "orchestrator/cli/output.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

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
};

QueryResult ExpandTable(const std::vector<ResolvedJob>& jobs) {
  QueryResult t;
  t.columns = {"id",       "family",          "scale",          "sparsity",
               "stride",   "context",         "n_layers",       "d_model",
               "n_params_total", "n_params_active", "flops_per_token", "flops_ratio",
               "tokens",   "steps",           "train_flops"};
  for (const ResolvedJob& j : jobs) {
    t.rows.push_back({j.id, std::string(FamilyName(j.shape.family)), j.scale, j.sparsity,
                      j.shape.stride, j.shape.context, j.shape.n_layers, j.shape.d_model,
                      j.n_params_total, j.n_params_active, j.flops_per_token, j.flops_ratio(),
                      j.tokens, j.steps, j.train_flops});
  }
  return t;
}

absl::StatusOr<std::vector<ResolvedJob>> LoadAndExpand(const std::string& path,
                                                       SweepSpec* spec_out) {
  ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepSpec(path));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec));
  if (spec_out != nullptr) *spec_out = std::move(spec);
  return jobs;
}

absl::Status Expand(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, LoadAndExpand(f.spec, nullptr));
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
  // Everything is validated and expanded before the database is touched.
  SweepSpec spec;
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, LoadAndExpand(f.spec, &spec));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
  ASSIGN_OR_RETURN(SubmitResult r, store->SubmitSweep(spec, jobs));
  const int64_t present = r.jobs_in_spec - r.new_jobs;
  if (r.new_jobs == 0 && r.linked_jobs == 0 && !r.sweep_created) {
    out << fmt::format("sweep '{}': all {} jobs already submitted; nothing changed\n", spec.name,
                       r.jobs_in_spec);
  } else {
    out << fmt::format("sweep '{}' {}: {} jobs in the spec, {} new, {} already present{}\n",
                       spec.name, r.sweep_created ? "created" : "updated", r.jobs_in_spec,
                       r.new_jobs, present,
                       r.linked_jobs > 0 ? fmt::format(" ({} shared with other sweeps)",
                                                       r.linked_jobs)
                                         : "");
  }
  return absl::OkStatus();
}

absl::Status Status(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ASSIGN_OR_RETURN(std::vector<StateCounts> counts, store->CountStates(f.sweep));
  QueryResult t;
  t.columns.push_back("sweep");
  for (JobState s : kAllJobStates) t.columns.emplace_back(JobStateName(s));
  t.columns.push_back("total");
  for (const StateCounts& c : counts) {
    std::vector<Value> row{c.sweep};
    for (JobState s : kAllJobStates) row.emplace_back(c.counts.at(s));
    row.emplace_back(c.total);
    t.rows.push_back(std::move(row));
  }
  PrintResult(t, format, out);
  return absl::OkStatus();
}

absl::Status Results(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ASSIGN_OR_RETURN(QueryResult rows, store->JobResults(f.sweep));
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
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
  ASSIGN_OR_RETURN(int64_t moved, store->ResumeSweep(f.sweep));
  out << fmt::format("sweep '{}': {} failed or cancelled jobs back to pending\n", f.sweep, moved);
  return absl::OkStatus();
}

absl::Status Cancel(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
  ASSIGN_OR_RETURN(int64_t moved, store->Cancel(f.target));
  out << fmt::format("'{}': {} jobs cancelled\n", f.target, moved);
  return absl::OkStatus();
}

absl::Status DataPrepare(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(TokenMeta meta, PrepareByteDataset(f.prepare));
  out << fmt::format("{}: {} train and {} validation tokens ({}, vocab {})\n",
                     f.prepare.output_dir, meta.train_tokens, meta.val_tokens, meta.tokenizer,
                     meta.vocab_size);
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

  auto* expand = app.add_subcommand("expand", "Resolve a sweep's grid into jobs without running");
  expand->add_option("spec", f.spec, "Sweep file (YAML)")->required();
  add_format(expand);

  auto* submit = app.add_subcommand("submit", "Validate, expand and record a sweep");
  submit->add_option("spec", f.spec, "Sweep file (YAML)")->required();
  add_db(submit);

  auto* status = app.add_subcommand("status", "Jobs per state, for one sweep or all");
  status->add_option("sweep", f.sweep, "Sweep name (all sweeps when omitted)");
  add_db(status);
  add_format(status);

  auto* results = app.add_subcommand("results", "One row per job: axes, sizes, status, losses");
  results->add_option("sweep", f.sweep, "Sweep name")->required();
  add_db(results);
  add_format(results);

  auto* curves = app.add_subcommand("curves", "One job's curve: step, tokens, FLOPs, metrics");
  curves->add_option("job", f.job, "Job id")->required();
  add_db(curves);
  add_format(curves);

  auto* sql = app.add_subcommand("sql", "Run one read-only SQL query on the database");
  sql->add_option("query", f.sql, "SQL statement (SELECT ...)")->required();
  add_db(sql);
  add_format(sql);

  auto* resume = app.add_subcommand("resume", "Move a sweep's failed and cancelled jobs to pending");
  resume->add_option("sweep", f.sweep, "Sweep name")->required();
  add_db(resume);

  auto* cancel = app.add_subcommand("cancel", "Cancel a sweep's unfinished jobs, or one job");
  cancel->add_option("target", f.target, "Sweep name or job id")->required();
  add_db(cancel);

  auto* data = app.add_subcommand("data", "Token datasets");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "Turn text files into byte-level tokens");
  prepare->add_option("--input", f.prepare.inputs, "Text files, concatenated in order")
      ->required()
      ->check(CLI::ExistingFile);
  prepare->add_option("--output", f.prepare.output_dir, "Dataset folder to write")->required();
  prepare->add_flag("--strip-tags", f.prepare.strip_tags,
                    "Turn Brown-corpus word/tag tokens into plain text");
  prepare->add_option("--val-fraction", f.prepare.val_fraction,
                      "Fraction of the bytes (at the end) kept for validation")
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
  if (expand->parsed()) {
    name = "expand";
    result = Expand(f, out);
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
  }
  if (!result.ok()) {
    err << result.message() << "\n";
    err << "xmod " << name << ": " << (ExitCodeFor(result) == kExitUsage ? "invalid input" : "failed")
        << "; nothing was written\n";
  }
  return ExitCodeFor(result);
}

}  // namespace xmod
