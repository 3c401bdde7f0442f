#include "orchestrator/cli/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "common/token_data.h"
#include "common/version/build_info.h"
#include "orchestrator/coordinator/coordinator.h"
#include "orchestrator/dashboard/http_server.h"
#include "orchestrator/data/import.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/launch/export_job.h"
#include "orchestrator/launch/local_run.h"
#include "orchestrator/plan/plan_command.h"
#include "orchestrator/report/compare.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/report/slopes.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/service/client.h"
#include "orchestrator/service/server.h"
#include "orchestrator/store/cells.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/sweep/design_check.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/power.h"
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
  std::string tokenizer = "bytes";  // data prepare: bytes, sentencepiece-bpe/-unigram, or a .model
  int64_t tokenizer_vocab = 8000;   // data prepare: the vocabulary of a trained model
  ImportOptions import;
  bool allow_unidentifiable = false;   // expand, check, submit: design errors become warnings
  int64_t max_jobs = kDefaultMaxJobs;  // expand, check, submit, serve: the sweep size bound
  bool by_config = false;              // results: one row per configuration (seeds together)
  bool slopes = false;                 // results: local slopes d ln L / d ln D and d ln L / d ln N
  bool pairs = false;                  // results: routed configurations minus their dense partners
  bool lr_scan = false;                // results: the lr scan's mean losses and choices
  bool baselines = false;              // results: each sized baseline beside its matched job
  std::ostream* err = nullptr;         // where design warnings go
  // Remote coordinator.
  std::string coordinator;
  std::string token_file;
  std::string worker_token_file;  // serve: the worker groups' token
  std::string tls_ca;
  bool watch = false;
  // serve
  std::string listen = "127.0.0.1:50051";
  std::string address_file;  // written with HOST:PORT once the port is bound
  std::string advertise;     // the HOST written there (default: the listen host or hostname)
  std::string tls_cert, tls_key;
  bool insecure = false;
  double lease_ttl = 30.0;
  std::string http;  // serve, dashboard: the dashboard's HOST:PORT (empty: none)
  // run
  LocalRunOptions run;
  // check --power
  bool power = false;
  PowerOptions power_options;
  std::vector<std::string> assume;
  // results
  std::vector<std::string> columns;
  std::string where;
  // tag
  std::vector<std::string> tags_add, tags_remove;
  std::optional<std::string> note;
  // compare
  std::string sweep_b;
  std::string db_b;
  // fit, plot
  FitCommandOptions fit;
  PlotCommandOptions plot;
  AdviseCommandOptions advise;
  ExportOptions export_options;
  PlanCommandOptions plan;
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

std::string ExpertsCell(const ModelShape& s);
std::string FlopTotals(const std::vector<ResolvedJob>& jobs);

QueryResult ExpandTable(const std::vector<ResolvedJob>& jobs) {
  QueryResult t;
  t.columns = {"id",
               "family",
               "scale",
               "sparsity",
               "stride",
               "context",
               "n_layers",
               "d_model",
               "n_params_total",
               "n_params_active",
               "flops_per_token",
               "flops_ratio",
               "tokens",
               "steps",
               "train_flops",
               "role",
               "start_step",
               "micro_batch",
               "recompute",
               "sharding",
               "memory_per_rank_gib",
               "experts"};
  for (const ResolvedJob& j : jobs) {
    t.rows.push_back({j.file.id,
                      std::string(FamilyName(j.file.shape.family)),
                      j.scale,
                      j.sparsity,
                      j.file.shape.stride,
                      j.file.shape.context,
                      j.file.shape.n_layers,
                      j.file.shape.d_model,
                      j.n_params_total,
                      j.n_params_active,
                      j.file.flops_per_token,
                      j.flops_ratio(),
                      j.file.tokens,
                      j.file.steps,
                      j.train_flops,
                      std::string(j.role()),
                      j.file.start_step,
                      j.file.micro_batch_size,
                      std::string(j.file.recompute ? "on" : "off"),
                      j.file.optimizer_sharding,
                      j.memory.peak / double(int64_t{1} << 30),
                      ExpertsCell(j.file.shape)});
  }
  return t;
}

// "X training FLOPs", and with cooldown branches what the same results would
// cost with every budget trained alone.
std::string FlopTotals(const std::vector<ResolvedJob>& jobs) {
  double flops = 0, standalone = 0;
  int64_t trunks = 0, branches = 0;
  for (const ResolvedJob& j : jobs) {
    flops += j.train_flops;
    standalone += j.standalone_flops();
    trunks += j.file.is_trunk() ? 1 : 0;
    branches += j.file.is_branch() ? 1 : 0;
  }
  if (trunks == 0) return fmt::format("{:.3g} training FLOPs", flops);
  return fmt::format(
      "{:.3g} training FLOPs with {} cooldown trunks and {} branches, against {:.3g} with every "
      "budget trained alone ({:.3f} of it)",
      flops, trunks, branches, standalone, flops / standalone);
}

// "E x d_e top-k" (a fixed number of experts per token, moe), "E x d_e relu"
// (data-dependent, deco), "" for a family without experts.
std::string ExpertsCell(const ModelShape& s) {
  if (!IsExpertFamily(s.family)) return "";
  return s.experts.top_k > 0
             ? fmt::format("{}x{} top-{}", s.experts.experts, s.experts.width, s.experts.top_k)
             : fmt::format("{}x{} relu", s.experts.experts, s.experts.width);
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
    *f.err << SizingReport(jobs);
  }
  if (spec_out != nullptr) *spec_out = std::move(spec);
  return jobs;
}

// xmod check: the design report, whole; exit 2 when it has errors.
absl::Status Check(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepSpec(f.spec));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec, f.max_jobs));
  const DesignReport design = CheckDesign(spec, jobs);
  out << fmt::format("sweep '{}': {} jobs, {}; laws checked: [{}]\n", spec.name, jobs.size(),
                     FlopTotals(jobs), fmt::join(design.laws, ", "));
  out << design.Text(f.spec);
  if (spec.resources.adaptive_order) {
    double largest = 0.0;
    int64_t steered = 0;
    for (const ResolvedJob& j : jobs) {
      if (!j.dense_law_point()) continue;
      largest = std::max(largest, static_cast<double>(j.n_params_active));
      ++steered;
    }
    const auto [n, d] = OrderTarget(spec.resources, largest);
    out << fmt::format(
        "lease order: adaptive: {} dense job(s) ordered by the dense law's expected gain at N "
        "{:.3g}, D {:.3g} once 6 have run (docs/order.md); the rest cheapest-first\n",
        steered, n, d);
  }
  if (!design.ok() && !f.allow_unidentifiable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "design check failed for the laws [", absl::StrJoin(design.laws, ", "),
        "] (errors above; see docs/design-checks.md): fix the sweep, name fewer laws in "
        "design.laws, or pass --allow-unidentifiable"));
  }
  out << (design.ok() ? "design check passed\n" : "design check failed (allowed)\n");
  if (f.power) {
    PowerOptions options = f.power_options;
    for (const std::string& a : f.assume) {
      ASSIGN_OR_RETURN(const auto name_value, ParseNameValue(a, "--assume", "eta=0.3"));
      options.assume[name_value.first] = name_value.second;
    }
    ASSIGN_OR_RETURN(const PowerReport power, PowerCheck(spec, jobs, options));
    out << PowerText(power);
  }
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
    if (format == Format::kTable) out << "total: " << FlopTotals(jobs) << "\n";
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
    SchedulerOptions options;
    options.max_jobs = f.max_jobs;
    Scheduler scheduler(store.get(), options);
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

// "" when every job with an attempt ran on one build (or none said which); else a
// warning naming the builds and how many jobs each ran.
std::string MixedBuildsWarning(const std::map<std::string, std::string>& commits,
                               const std::string& sweep) {
  std::map<std::string, int> jobs;
  for (const auto& [job, commit] : commits) ++jobs[commit.empty() ? "unrecorded" : commit];
  if (jobs.size() < 2) return "";
  std::vector<std::string> parts;
  for (const auto& [commit, n] : jobs) parts.push_back(fmt::format("{}: {} jobs", commit, n));
  return fmt::format(
      "warning: {} ran on {} different builds ({}); results from different code may not be "
      "comparable: `xmod results` shows each job's commit",
      sweep.empty() ? std::string("the jobs in this database") : "sweep '" + sweep + "'",
      jobs.size(), absl::StrJoin(parts, ", "));
}

absl::Status StatusOnce(const Flags& f, Format format, std::ostream& out) {
  std::vector<SweepSummary> sweeps;
  std::vector<JobProgressRow> jobs;  // of the named sweep
  if (!f.coordinator.empty()) {
    ASSIGN_OR_RETURN(auto remote, Connect(f));
    ASSIGN_OR_RETURN(sweeps, remote->Status(f.sweep));
    if (!f.sweep.empty()) {
      ASSIGN_OR_RETURN(jobs, remote->ListJobs(f.sweep));
    }
  } else {
    // The same numbers as the server's: a local scheduler over the file.
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
    Scheduler scheduler(store.get(), SchedulerOptions{});
    ASSIGN_OR_RETURN(sweeps, scheduler.Status(f.sweep, &jobs));
  }
  PrintResult(StatusTable(sweeps, SystemClock().Now()), format, out);
  if (f.coordinator.empty() && f.err != nullptr) {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
    ASSIGN_OR_RETURN(auto commits, store->JobCommits(f.sweep));
    const std::string warning = MixedBuildsWarning(commits, f.sweep);
    if (!warning.empty()) *f.err << warning << "\n";
  }
  // The named sweep's jobs in flight, with their progress.
  const QueryResult running = InFlightTable(jobs);
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

// The coordinator options `xmod serve` takes from its flags; INVALID_ARGUMENT for
// flags that do not go together, NOT_FOUND for an unreadable token file.
absl::StatusOr<CoordinatorOptions> ServeOptions(const Flags& f, std::ostream& out) {
  CoordinatorOptions options;
  options.db = f.db;
  options.server.listen = f.listen;
  options.server.tls_cert = f.tls_cert;
  options.server.tls_key = f.tls_key;
  options.server.insecure = f.insecure;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(options.server.token, ReadTokenFile(f.token_file));
  }
  if (!f.worker_token_file.empty()) {
    ASSIGN_OR_RETURN(options.server.worker_token, ReadTokenFile(f.worker_token_file));
  }
  RETURN_IF_ERROR(CheckLeaseTtl(f.lease_ttl, "--lease-ttl"));
  options.lease_ttl_seconds = f.lease_ttl;
  options.max_jobs = f.max_jobs;
  options.http = f.http;
  options.log = [&out](const std::string& line) { out << line + "\n" << std::flush; };
  if (!f.advertise.empty() && f.address_file.empty()) {
    return absl::InvalidArgumentError(
        "--advertise names the host written to --address-file; give --address-file too");
  }
  if (!f.address_file.empty() &&
      !std::filesystem::is_directory(std::filesystem::absolute(f.address_file).parent_path())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--address-file ", f.address_file, ": its folder does not exist"));
  }
  return options;
}

// The address other machines dial: --advertise, else the listen host, else (for
// a wildcard listen) this machine's name; with the bound port.
std::string AdvertisedAddress(const Flags& f, int port) {
  std::string host = f.advertise;
  if (host.empty()) host = f.listen.substr(0, f.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {0};
    host = ::gethostname(name, sizeof(name) - 1) == 0 && name[0] != 0 ? name : "127.0.0.1";
  }
  return absl::StrCat(host, ":", port);
}

// Writes `address` to `path` through a rename, so a reader sees all of it or none.
absl::Status PublishAddress(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::trunc);
    file << address << "\n";
    if (!file.flush()) {
      return absl::InternalError(absl::StrCat("--address-file ", tmp, ": cannot write"));
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    return absl::InternalError(absl::StrCat("--address-file ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

// Removes the address file only while it holds our own address: another
// coordinator may have published its own since.
void WithdrawAddress(const std::string& path, const std::string& address) {
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line) && line == address) std::filesystem::remove(path);
}

// xmod serve: the coordinator on a database file until SIGINT or SIGTERM.
absl::Status Serve(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(CoordinatorOptions options, ServeOptions(f, out));
  ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator, Coordinator::Open(options));
  RETURN_IF_ERROR(coordinator->Serve());
  if (coordinator->dashboard() != nullptr) {
    out << "xmod serve: dashboard on http://" << coordinator->dashboard()->address() << "/"
        << std::endl;
  }
  const CoordinatorServer& server = coordinator->server();
  const std::string advertised = AdvertisedAddress(f, server.port());
  out << "xmod serve: " << f.db << " listening on " << server.listen_address()
      << " (this machine: " << server.address() << "; lease TTL " << f.lease_ttl << " s"
      << (options.server.token.empty() ? ", no token" : ", token required")
      << (options.server.tls_cert.empty() ? "" : ", TLS") << ")" << std::endl;
  if (!f.address_file.empty()) {
    RETURN_IF_ERROR(PublishAddress(f.address_file, advertised));
    out << "xmod serve: address " << advertised << " written to " << f.address_file << std::endl;
  }
  std::signal(SIGINT, OnServeSignal);
  std::signal(SIGTERM, OnServeSignal);
  while (!g_serve_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  out << "xmod serve: shutting down" << std::endl;
  if (!f.address_file.empty()) WithdrawAddress(f.address_file, advertised);
  coordinator->Shutdown();
  return absl::OkStatus();
}

// xmod dashboard: the web pages over a database file, with no coordinator.
absl::Status Dashboard(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  Scheduler scheduler(store.get(), SchedulerOptions{});
  DashboardOptions options;
  options.listen = f.http;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(options.token, ReadTokenFile(f.token_file));
  }
  ASSIGN_OR_RETURN(auto server, DashboardServer::Start(store.get(), &scheduler, options));
  out << "xmod dashboard: " << f.db << " on http://" << server->address() << "/"
      << (options.token.empty() ? "" : " (token required: open /login?token=TOKEN once)")
      << std::endl;
  std::signal(SIGINT, OnServeSignal);
  std::signal(SIGTERM, OnServeSignal);
  while (!g_serve_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  out << "xmod dashboard: shutting down" << std::endl;
  return absl::OkStatus();
}

// The ids of the sweep's jobs whose job_results row satisfies `where`, an SQL
// expression over the view's columns (read-only: it runs through `xmod sql`'s guard).
absl::StatusOr<std::set<std::string>> JobsWhere(SqliteStore* store, const std::string& sweep,
                                                const std::string& where) {
  std::string quoted;
  for (char c : sweep) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  auto rows = store->Query(absl::StrCat("SELECT job_id FROM job_results WHERE sweep = '", quoted,
                                        "' AND (", where, ")"));
  if (!rows.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--where: ", rows.status().message(),
                     " (an SQL expression over the columns of xmod results, e.g. "
                     "\"status = 'succeeded' AND context >= 256\")"));
  }
  std::set<std::string> ids;
  for (const auto& row : rows->rows) ids.insert(AsText(row[0]));
  return ids;
}

absl::Status Results(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  std::optional<std::set<std::string>> kept;
  if (!f.where.empty()) {
    RETURN_IF_ERROR(store->JobResultRows(f.sweep).status());  // NOT_FOUND for no such sweep
    ASSIGN_OR_RETURN(kept, JobsWhere(store.get(), f.sweep, f.where));
  }
  QueryResult rows;
  if (f.by_config || f.baselines || f.slopes || f.pairs || f.lr_scan) {
    if (int{f.by_config} + int{f.baselines} + int{f.slopes} + int{f.pairs} + int{f.lr_scan} > 1) {
      return absl::InvalidArgumentError(
          "give one of --by-config, --baselines, --slopes, --pairs and --lr-scan");
    }
    ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, store->JobResultRows(f.sweep));
    if (kept.has_value()) {
      jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                                [&](const JobResultRow& j) { return kept->count(j.id) == 0; }),
                 jobs.end());
    }
    rows = f.by_config   ? ReplicateTable(jobs)
           : f.baselines ? BaselineComparison(jobs)
           : f.pairs     ? PairedDifferences(jobs)
           : f.lr_scan   ? LrScanTable(jobs)
                         : LocalSlopes(jobs);
  } else {
    ASSIGN_OR_RETURN(rows, ResultsTable(store.get(), f.sweep));
    // The build each job's newest attempt ran on (docs/provenance.md).
    ASSIGN_OR_RETURN(auto commits, store->JobCommits(f.sweep));
    const auto id = std::find(rows.columns.begin(), rows.columns.end(), "job_id");
    if (id != rows.columns.end()) {
      const size_t c = static_cast<size_t>(id - rows.columns.begin());
      rows.columns.push_back("commit");
      for (auto& row : rows.rows) {
        const std::string* job = std::get_if<std::string>(&row[c]);
        const auto it = job == nullptr ? commits.end() : commits.find(*job);
        row.push_back(it == commits.end() ? Value() : Value(it->second));
      }
      if (kept.has_value()) {
        rows.rows.erase(std::remove_if(rows.rows.begin(), rows.rows.end(),
                                       [&](const std::vector<Value>& row) {
                                         const std::string* job = std::get_if<std::string>(&row[c]);
                                         return job == nullptr || kept->count(*job) == 0;
                                       }),
                        rows.rows.end());
      }
    }
    // The bootstrap's grouping key is a long JSON text: out of the default table
    // (CSV and JSON keep it; --columns cluster_key shows it).
    if (format == Format::kTable && f.columns.empty()) {
      const auto key = std::find(rows.columns.begin(), rows.columns.end(), "cluster_key");
      if (key != rows.columns.end()) {
        const auto c = key - rows.columns.begin();
        rows.columns.erase(key);
        for (auto& row : rows.rows) row.erase(row.begin() + c);
      }
    }
  }
  if (!f.columns.empty()) RETURN_IF_ERROR(SelectColumns(f.columns, &rows));
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

absl::Status Export(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ExportOptions o = f.export_options;
  o.job = f.job;
  return ExportJobWeights(*store, o, out);
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
    ASSIGN_OR_RETURN(moved, remote->Resume(f.target));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
    Scheduler scheduler(store.get(), SchedulerOptions{});
    ASSIGN_OR_RETURN(moved, scheduler.Resume(f.target));
  }
  out << fmt::format("'{}': {} failed or cancelled jobs back to pending\n", f.target, moved);
  return absl::OkStatus();
}

absl::Status Tag(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, false));
  SqliteStore::SweepLabels labels;
  if (f.tags_add.empty() && f.tags_remove.empty() && !f.note.has_value()) {
    ASSIGN_OR_RETURN(labels, store->SweepTags(f.sweep));
  } else {
    ASSIGN_OR_RETURN(labels, store->SetSweepTags(f.sweep, f.tags_add, f.tags_remove, f.note));
  }
  out << fmt::format("sweep '{}': tags: {}\n", f.sweep,
                     labels.tags.empty() ? "(none)" : absl::StrJoin(labels.tags, ", "));
  out << fmt::format("note: {}\n", labels.note.empty() ? "(none)" : labels.note);
  return absl::OkStatus();
}

absl::Status Compare(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(f.format));
  ASSIGN_OR_RETURN(auto store, OpenStore(f.db, true));
  ASSIGN_OR_RETURN(std::vector<JobResultRow> a, store->JobResultRows(f.sweep));
  std::vector<JobResultRow> b;
  if (f.db_b.empty()) {
    ASSIGN_OR_RETURN(b, store->JobResultRows(f.sweep_b));
  } else {
    ASSIGN_OR_RETURN(auto other, OpenStore(f.db_b, true));
    ASSIGN_OR_RETURN(b, other->JobResultRows(f.sweep_b));
  }
  const SweepComparison c = CompareSweeps(a, b);
  // The summary goes to standard error for CSV and JSON, which stay machine-readable.
  std::ostream& note = format == Format::kTable || f.err == nullptr ? out : *f.err;
  note << fmt::format(
      "A = '{}', B = '{}'{}: {} shared configurations, {} only in A, {} only in B\n", f.sweep,
      f.sweep_b, f.db_b.empty() ? "" : fmt::format(" (B from {})", f.db_b), c.shared, c.only_a,
      c.only_b);
  if (c.differences.empty()) {
    note << "the sweeps differ in no setting that is constant within each (shared jobs compare "
            "with themselves)\n";
  } else {
    note << "B differs from A in: " << absl::StrJoin(c.differences, "; ") << "\n";
  }
  if (c.shared > 0) {
    note << fmt::format(
        "mean difference B - A over shared configurations: {:+.4g}{}; B lower in {} "
        "of {}\n",
        c.mean_diff,
        c.shared >= 2 ? fmt::format(" ± {:.2g} (SE across configurations)", c.mean_diff_se)
                      : std::string(" (one configuration: no spread)"),
        c.b_lower, c.shared);
  }
  PrintResult(c.table, format, out);
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
    Scheduler scheduler(store.get(), SchedulerOptions{});
    ASSIGN_OR_RETURN(moved, scheduler.Cancel(f.target));
  }
  out << fmt::format("'{}': {} jobs cancelled\n", f.target, moved);
  return absl::OkStatus();
}

// SentencePiece runs in xmod-sentencepiece, beside xmod (its protobuf-lite cannot
// share a process with gRPC's protobuf): its output is passed on, exit 2 is bad input.
absl::Status PrepareWithSentencePiece(const Flags& f, std::ostream& out) {
  const std::string binary = SelfDirectory() + "/xmod-sentencepiece";
  if (::access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        binary,
        ": not found or not executable; SentencePiece tokenizers run in it (built with "
        "xmod from libsentencepiece-dev)"));
  }
  std::vector<std::string> argv = {binary, "--output", f.prepare.output_dir, "--val-fraction",
                                   fmt::format("{}", f.prepare.val_fraction)};
  if (f.prepare.strip_tags) argv.push_back("--strip-tags");
  if (absl::EndsWith(f.tokenizer, ".model")) {
    argv.insert(argv.end(), {"--model", f.tokenizer});
  } else {
    argv.insert(argv.end(),
                {"--train", f.tokenizer.substr(std::string_view("sentencepiece-").size()),
                 "--vocab", std::to_string(f.tokenizer_vocab)});
  }
  argv.push_back("--input");
  argv.insert(argv.end(), f.prepare.inputs.begin(), f.prepare.inputs.end());
  ASSIGN_OR_RETURN(HelperRun run, RunHelper(argv));
  if (run.exit_code == 0) {
    out << run.output;
    return absl::OkStatus();
  }
  std::string text = std::move(run.output);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (run.exit_code == 2) return absl::InvalidArgumentError(text);
  return absl::InternalError(absl::StrCat(binary, " failed: ", text));
}

absl::Status DataPrepare(const Flags& f, std::ostream& out) {
  if (f.tokenizer == "bytes") {
    ASSIGN_OR_RETURN(TokenMeta meta, PrepareByteDataset(f.prepare));
    out << fmt::format("{}: {} train and {} validation tokens ({}, vocab {}{})\n",
                       f.prepare.output_dir, meta.train_tokens, meta.val_tokens, meta.tokenizer,
                       meta.vocab_size,
                       meta.eos_token >= 0 ? fmt::format(", EOS {}", meta.eos_token) : "");
    out << fmt::format("validation split: {}\n", meta.val_split);
    return absl::OkStatus();
  }
  if (f.prepare.eos) {
    return absl::InvalidArgumentError(
        "--eos: only byte-level ids take it; a SentencePiece model ends documents with its own "
        "</s>");
  }
  if (f.tokenizer != "sentencepiece-bpe" && f.tokenizer != "sentencepiece-unigram" &&
      !absl::EndsWith(f.tokenizer, ".model")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer: '", f.tokenizer,
        "' is not bytes, sentencepiece-bpe, sentencepiece-unigram or a SentencePiece .model file"));
  }
  return PrepareWithSentencePiece(f, out);
}

absl::Status DataImport(const Flags& f, std::ostream& out) {
  ASSIGN_OR_RETURN(TokenMeta meta, ImportTokens(f.import));
  out << fmt::format("{}: {} train and {} validation tokens ({}, vocab {}, EOS {}, {})\n",
                     f.import.output_dir, meta.train_tokens, meta.val_tokens, meta.tokenizer,
                     meta.vocab_size, meta.eos_token, meta.dtype);
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

// ---- Flags shared by several commands ------------------------------------------
void AddFormat(CLI::App* cmd, Flags& f) {
  cmd->add_option("--format", f.format, "Output format: table, csv or json")->capture_default_str();
}
void AddDb(CLI::App* cmd, Flags& f) {
  cmd->add_option("--db", f.db, "SQLite database file")->required();
}
// Commands that work on a file or through a running coordinator.
void AddDbOrRemote(CLI::App* cmd, Flags& f) {
  cmd->add_option("--db", f.db, "SQLite database file");
  cmd->add_option("--coordinator", f.coordinator, "Coordinator address host:port");
  cmd->add_option("--token-file", f.token_file, "File holding the coordinator's bearer token");
  cmd->add_option("--tls-ca", f.tls_ca, "CA certificate (PEM) of a TLS coordinator");
}
void AddMaxJobs(CLI::App* cmd, int64_t* target) {
  cmd->add_option("--max-jobs", *target, "Refuse a sweep that expands to more jobs than this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}
void AddSpec(CLI::App* cmd, std::string* target) {
  cmd->add_option("spec", *target, "Sweep file (YAML)")->required();
}
void AddAllow(CLI::App* cmd, Flags& f) {
  cmd->add_flag("--allow-unidentifiable", f.allow_unidentifiable,
                "Accept a sweep whose design check fails (the errors are printed as warnings)");
  AddMaxJobs(cmd, &f.max_jobs);
}

// ---- Each command's own flags ------------------------------------------------------
void ExpandFlags(CLI::App* cmd, Flags& f) {
  AddSpec(cmd, &f.spec);
  AddFormat(cmd, f);
  AddAllow(cmd, f);
}
void CheckFlags(CLI::App* cmd, Flags& f) {
  AddSpec(cmd, &f.spec);
  AddAllow(cmd, f);
  CLI::Option* power =
      cmd->add_flag("--power", f.power,
                    "Simulate the design under an assumed X-MoD law (the one fitted nearest its "
                    "scale) and under it with a misfit: expected standard errors, how often "
                    "advise picks the right configuration, the lack-of-fit test's size and power");
  cmd->add_option("--noise", f.power_options.noise, "--power: relative seed noise per run")
      ->capture_default_str()
      ->needs(power);
  cmd->add_option("--misfit", f.power_options.misfit,
                  "--power: RMS share of the loss of the second truth's N x D misfit (default: "
                  "twice the noise)")
      ->check(CLI::NonNegativeNumber)
      ->needs(power);
  cmd->add_option("--simulations", f.power_options.simulations, "--power: simulated sweeps")
      ->capture_default_str()
      ->needs(power);
  cmd->add_option("--seed", f.power_options.seed, "--power: seed of the simulated noise")
      ->capture_default_str()
      ->needs(power);
  cmd->add_option("--assume", f.assume,
                  "--power: a parameter of the assumed law, NAME=VALUE (E, A, B, alpha, beta, "
                  "eta, c_T, beta_T, c_s, psi), repeatable")
      ->needs(power);
}
void SubmitFlags(CLI::App* cmd, Flags& f) {
  AddSpec(cmd, &f.spec);
  AddAllow(cmd, f);
  AddDbOrRemote(cmd, f);
}
void StatusFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("sweep", f.sweep, "Sweep name (all sweeps when omitted)");
  cmd->add_flag("--watch", f.watch, "Refresh every two seconds until interrupted");
  AddDbOrRemote(cmd, f);
  AddFormat(cmd, f);
}
void ResultsFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("sweep", f.sweep, "Sweep name")->required();
  AddDb(cmd, f);
  AddFormat(cmd, f);
  cmd->add_option("--columns", f.columns,
                  "Only these columns, in this order (comma-separated; e.g. "
                  "job_id,context,final_val_loss)")
      ->delimiter(',');
  cmd->add_option("--where", f.where,
                  "Only jobs whose row satisfies this SQL expression over the columns "
                  "(e.g. \"status = 'succeeded' AND context >= 256\")");
  cmd->add_flag("--by-config", f.by_config,
                "One row per configuration: seeds, mean loss, seed spread, evaluation SE");
  cmd->add_flag("--baselines", f.baselines,
                "Each sized baseline (moe, deco) beside the job it was sized against");
  cmd->add_flag("--slopes", f.slopes,
                "Local slopes d ln L/d ln D at each scale and d ln L/d ln N at each budget, "
                "with seed intervals");
  cmd->add_flag("--pairs", f.pairs,
                "Each routed configuration minus the dense runs of its scale, context and "
                "budget, with seed error bars, FLOPs and capacity checks");
  cmd->add_flag("--lr-scan", f.lr_scan,
                "The lr scan (train.lr_scan): mean loss per family, scale and lr factor, and "
                "the factor the laws read");
}
void CurvesFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("job", f.job, "Job id")->required();
  AddDb(cmd, f);
  AddFormat(cmd, f);
}
void ExportFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("job", f.job, "Job id")->required();
  AddDb(cmd, f);
  cmd->add_option("--out", f.export_options.out,
                  "Folder for model.safetensors and config.json (made if missing)")
      ->required();
  f.export_options.format = "safetensors";
  cmd->add_option("--format", f.export_options.format, "safetensors (the only one)")
      ->capture_default_str();
  cmd->add_option("--run-dir", f.export_options.run_dir,
                  "Where the job's runs went (RUN_DIR/JOB_ID/checkpoints); default: from the "
                  "newest checkpoint the database recorded");
  cmd->add_option("--train-binary", f.export_options.train_binary,
                  "The xmod-train that reads the checkpoint (default: beside xmod)");
}
void SqlFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("query", f.sql, "SQL statement (SELECT ...)")->required();
  AddDb(cmd, f);
  AddFormat(cmd, f);
}
void ResumeFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("target", f.target, "Sweep name or job id")->required();
  AddDbOrRemote(cmd, f);
}
void TagFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("sweep", f.sweep, "Sweep name")->required();
  AddDb(cmd, f);
  cmd->add_option("--add", f.tags_add, "Tags to add (no commas or spaces, at most 64 bytes)");
  cmd->add_option("--remove", f.tags_remove, "Tags to remove");
  cmd->add_option("--note", f.note, "Replace the sweep's note (\"\" clears it)");
}
void CompareFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("sweep_a", f.sweep, "Sweep A")->required();
  cmd->add_option("sweep_b", f.sweep_b, "Sweep B")->required();
  AddDb(cmd, f);
  cmd->add_option("--db-b", f.db_b, "Read sweep B from this database file instead")
      ->check(CLI::ExistingFile);
  AddFormat(cmd, f);
}
void CancelFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("target", f.target, "Sweep name or job id")->required();
  AddDbOrRemote(cmd, f);
}
void ServeFlags(CLI::App* cmd, Flags& f) {
  AddDb(cmd, f);
  cmd->add_option("--listen", f.listen,
                  "Address to listen on (port 0: any free port); a port another process holds "
                  "is an error")
      ->capture_default_str();
  cmd->add_option("--address-file", f.address_file,
                  "Write HOST:PORT here once the port is bound (removed again on shutdown)");
  cmd->add_option("--advertise", f.advertise,
                  "The HOST of --address-file (default: the listen host, or this machine's name "
                  "for 0.0.0.0)");
  cmd->add_option("--token-file", f.token_file,
                  "The operator's bearer token: required in every call, accepted by every RPC");
  cmd->add_option("--worker-token-file", f.worker_token_file,
                  "A second token for worker groups: lease and report only, not submit, status, "
                  "resume or cancel");
  cmd->add_option("--tls-cert", f.tls_cert, "Server certificate (PEM)");
  cmd->add_option("--tls-key", f.tls_key, "Server private key (PEM)");
  cmd->add_flag("--insecure", f.insecure, "Allow a non-loopback address without a token");
  cmd->add_option("--http", f.http,
                  "Also serve the read-only web dashboard on HOST:PORT (docs/dashboard.md); off "
                  "loopback it needs --token-file");
  cmd->add_option("--lease-ttl", f.lease_ttl, "Seconds a lease lasts without a heartbeat")
      ->capture_default_str();
  AddMaxJobs(cmd, &f.max_jobs);
}
void DashboardFlags(CLI::App* cmd, Flags& f) {
  AddDb(cmd, f);
  cmd->add_option("--http", f.http, "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--token-file", f.token_file,
                  "The operator token every request must carry; required off loopback");
}
void FitFlags(CLI::App* cmd, Flags& f) {
  FitCommandOptions& o = f.fit;
  cmd->add_option("sweep", o.sweep, "Sweep name (with --db)");
  cmd->add_option("--db", o.db, "SQLite database file");
  cmd->add_option("--csv", o.csv,
                  "CSV file instead of a sweep: columns N,D,loss (dense), "
                  "N_active,N_total,D,T,capacity,stride,loss (xmod) or N_active,D,expansion,loss "
                  "(moe), header row");
  cmd->add_option("--law", o.law, absl::StrCat("Law to fit: ", absl::StrJoin(LawNames(), ", ")))
      ->capture_default_str();
  cmd->add_flag("--joint", o.joint,
                "xmod, moe: refine all parameters together after the two stages");
  cmd->add_flag("--holdout-largest", o.holdout_largest,
                "Fit without the largest scale and predict it");
  cmd->add_option("--bootstrap", o.bootstrap, "Resamples for percentile intervals (0: none)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the bootstrap resampling")->capture_default_str();
  cmd->add_option("--exclude-top-loss", o.exclude_top_loss, "Drop the K highest-loss points")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "Threads (0: every core)")->capture_default_str();
  cmd->add_option("--format", o.format, "Output format: table, csv or json")->capture_default_str();
  cmd->add_option("--fix", o.fix,
                  "Freeze a parameter: NAME=VALUE (E, A, B, alpha, beta; xmod: eta, c_T, beta_T, "
                  "c_s, psi; moe: delta, gamma, omega, zeta), repeatable");
  cmd->add_option("--metric", o.metric,
                  "Loss fitted: auto (val_loss_causal for routed runs), val_loss, val_loss_causal")
      ->capture_default_str();
  cmd->add_option("--params", o.params,
                  "Parameter count N: non-embedding or total (with embedding and head)")
      ->capture_default_str();
  cmd->add_option("--context", o.context, "Fit only the runs at this context length T");
  cmd->add_option("--granularity", o.granularity,
                  "moe: fit only the MoE runs of this granularity d_ff / d_e (the law has no "
                  "granularity term)");
}
void AdviseFlags(CLI::App* cmd, Flags& f) {
  AdviseCommandOptions& o = f.advise;
  cmd->add_option("sweep", o.sweep, "Sweep name")->required();
  cmd->add_option("--db", o.db, "SQLite database file")->required();
  cmd->add_option("--compute", o.advise.compute, "Training FLOPs C (6 N_active D)")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--context", o.advise.context,
                  "Context length T: one the sweep ran, or with --extrapolate another when it "
                  "ran two or more")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--n-active", o.advise.n_active,
                  "Active (FLOP-matched dense) parameters N; default: each configuration at its "
                  "compute-optimal N");
  cmd->add_flag("--extrapolate", o.advise.extrapolate,
                "Predict outside the compute, N and tokens-per-parameter ranges the sweep ran "
                "(says by how much)");
  cmd->add_option("--bootstrap", o.advise.bootstrap, "Refits behind the intervals and P(best)")
      ->capture_default_str();
  cmd->add_option("--seed", o.advise.seed, "Seed of the bootstrap resampling")
      ->capture_default_str();
  cmd->add_option("--threads", o.advise.threads, "Threads for the fits (0: every core)");
  cmd->add_option("--calibrate", o.calibrate,
                  "Simulate N sweeps at this design from the fitted laws (and from them with a "
                  "misfit), advise each, and report hit rate against P(best), interval coverage "
                  "and the hold-out's detection rate (docs/laws.md, \"Calibration\")");
  cmd->add_option("--misfit", o.misfit,
                  "--calibrate: RMS share of the loss of the perturbed truth's N x D misfit "
                  "(default: the used form's measured misfit, at least the seed noise)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--metric", o.metric,
                  "Loss read: auto (val_loss_causal for routed runs), val_loss, val_loss_causal")
      ->capture_default_str();
  cmd->add_option("--format", o.format, "Output format: table or json")->capture_default_str();
}
void PlotFlags(CLI::App* cmd, Flags& f) {
  PlotCommandOptions& o = f.plot;
  cmd->add_option("sweep", o.sweep, "Sweep name")->required();
  cmd->add_option("--db", o.db, "SQLite database file")->required();
  cmd->add_option("--out", o.out_dir, "Folder to write the plots to")->required();
  cmd->add_option("--image", o.image, "Image format: svg or png")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Threads for the fits (0: every core)");
}
void RunFlags(CLI::App* cmd, Flags& f) {
  LocalRunOptions& o = f.run;
  AddSpec(cmd, &o.spec_path);
  cmd->add_option("--db", o.db, "SQLite database file (default: <sweep name>.db)");
  cmd->add_option("--groups", o.groups, "Worker groups")->capture_default_str();
  cmd->add_option("--ranks", o.ranks, "Ranks per group")->capture_default_str();
  cmd->add_option("--threads", o.threads, "LibTorch threads per rank (0: cores / ranks)");
  cmd->add_option("--run-dir", o.run_dir, "Checkpoints, metric logs and group logs")
      ->capture_default_str();
  cmd->add_option("--lease-ttl", o.lease_ttl_seconds, "Seconds a lease lasts")
      ->capture_default_str();
  cmd->add_flag("--allow-unidentifiable", o.allow_unidentifiable,
                "Run a sweep whose design check fails");
  cmd->add_option("--http", o.http,
                  "Serve the read-only web dashboard on this loopback HOST:PORT while it runs");
  AddMaxJobs(cmd, &o.max_jobs);
}
void PrepareFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("--input", f.prepare.inputs, "Text files, one document each, in order")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output", f.prepare.output_dir, "Dataset folder to write")->required();
  cmd->add_flag("--strip-tags", f.prepare.strip_tags,
                "Turn Brown-corpus word/tag tokens into plain text");
  cmd->add_option("--val-fraction", f.prepare.val_fraction,
                  "Fraction held out for validation: every round(1/F)-th document, interleaved")
      ->capture_default_str();
  cmd->add_option("--tokenizer", f.tokenizer,
                  "bytes; sentencepiece-bpe or sentencepiece-unigram (trained on the training "
                  "documents); or an existing SentencePiece .model file")
      ->capture_default_str();
  cmd->add_option("--tokenizer-vocab", f.tokenizer_vocab,
                  "Vocabulary of a SentencePiece model trained here")
      ->capture_default_str();
  cmd->add_flag("--eos", f.prepare.eos,
                "Byte-level ids: end each document with id 256 (vocabulary 257)");
}
void ImportFlags(CLI::App* cmd, Flags& f) {
  ImportOptions& o = f.import;
  cmd->add_option("--format", o.format,
                  "nanogpt (nanoGPT or llm.c .bin), megatron (PREFIX.bin + PREFIX.idx) or raw")
      ->required();
  cmd->add_option("--input", o.inputs, "Token files, in order (megatron: the prefix)")->required();
  cmd->add_option("--val-input", o.val_inputs,
                  "Files kept whole as the validation split (default: every n-th document)");
  cmd->add_option("--output", o.output_dir, "Dataset folder to write")->required();
  cmd->add_option("--vocab-size", o.vocab_size, "The tokenizer's vocabulary (GPT-2: 50257)")
      ->required();
  cmd->add_option("--eos", o.eos, "The id that ends each document (GPT-2: 50256)")->required();
  cmd->add_option("--dtype", o.dtype, "raw only: uint16 or uint32");
  cmd->add_option("--tokenizer", o.tokenizer, "What made the ids, recorded in meta.json (gpt2)")
      ->capture_default_str();
  cmd->add_option("--val-fraction", o.val_fraction,
                  "Fraction held out for validation: every round(1/F)-th document")
      ->capture_default_str();
}
void StatsFlags(CLI::App* cmd, Flags& f) {
  cmd->add_option("dir", f.prepare.output_dir, "Dataset folder")->required();
  AddFormat(cmd, f);
}

void PlanCluster(CLI::App* cmd, Flags& f) {
  cmd->add_option("--cluster", f.plan.cluster, "Cluster profile (clusters/h100-sxm.yaml)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--calibration", f.plan.calibration,
                  "Efficiencies from `xmod plan calibrate` (default: the profile's)")
      ->check(CLI::ExistingFile);
}
void PlanPredictFlags(CLI::App* cmd, Flags& f) {
  PlanCluster(cmd, f);
  cmd->add_option("--configs", f.plan.configs, "Configurations, one CSV row each (docs/planner.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--format", f.plan.format, "Output format: table, csv or json")
      ->capture_default_str();
}
void PlanCalibrateFlags(CLI::App* cmd, Flags& f) {
  PlanCluster(cmd, f);
  cmd->add_option("--measured", f.plan.measured,
                  "Measured runs with tokens_per_s, one CSV row each")
      ->check(CLI::ExistingFile);
  cmd->add_option("--db", f.plan.db, "SQLite database of a sweep whose finished jobs are runs too");
  cmd->add_option("--sweep", f.plan.sweep, "That sweep's name");
  cmd->add_option("--out", f.plan.out, "Calibration file to write (JSON)")->required();
}
void PlanLayoutFlags(CLI::App* cmd, Flags& f) {
  PlanCluster(cmd, f);
  PlanCommandOptions& p = f.plan;
  cmd->add_option("--d-model", p.d_model, "Model width")->required();
  cmd->add_option("--n-layers", p.n_layers, "Layers")->required();
  cmd->add_option("--n-heads", p.n_heads, "Attention heads")->required();
  cmd->add_option("--kv-heads", p.kv_heads, "K/V heads (grouped-query attention; 0: n-heads)");
  cmd->add_option("--d-ff", p.d_ff, "MLP width (0: 4 x d-model)");
  cmd->add_option("--mlp", p.mlp, "gelu or swiglu")->capture_default_str();
  cmd->add_option("--vocab", p.vocab, "Vocabulary")->capture_default_str();
  cmd->add_option("--seq-len", p.seq_len, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--family", p.family, "Model family (dense)")->capture_default_str();
  cmd->add_option("--gpus", p.gpus, "GPUs")->required();
  cmd->add_option("--global-batch", p.global_batch, "Sequences per optimizer step")->required();
  cmd->add_option("--precision", p.precision, "bf16, fp16, fp8 or fp32")->capture_default_str();
  cmd->add_option("--top", p.top, "Layouts to print (the best and runners-up)")
      ->capture_default_str();
  cmd->add_option("--format", p.format, "Output format: table or json")->capture_default_str();
}

void PlanSweepFlags(CLI::App* cmd, Flags& f) {
  PlanCommandOptions& p = f.plan;
  // Named in capitals: newer CLI11 refuses a subcommand option (plan calibrate's
  // --sweep) that matches a positional of its parent by name.
  cmd->add_option("SWEEP", p.sweep, "Sweep whose fitted laws rank the candidates");
  cmd->add_option("--db", p.db, "SQLite database file");
  cmd->add_option("--cluster", p.cluster, "Cluster profile (clusters/h100-sxm.yaml)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--calibration", p.calibration,
                  "Efficiencies from `xmod plan calibrate` (default: the profile's)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--gpu-hours", p.gpu_hours, "GPU-hours to spend on the training run");
  cmd->add_option("--context", p.context, "Context T (one the sweep ran)");
  cmd->add_option("--gpus", p.gpus, "GPUs the run uses")->capture_default_str();
  cmd->add_option("--global-batch-tokens", p.global_batch_tokens, "Tokens per optimizer step")
      ->capture_default_str();
  cmd->add_option("--widths", p.widths, "Candidate widths d_model (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--aspect", p.aspect, "d_model / n_layers of the candidates")
      ->capture_default_str();
  cmd->add_option("--vocab", p.vocab, "Vocabulary of the candidates")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Experts per token of the moe candidates")
      ->capture_default_str();
  cmd->add_option("--bootstrap", p.bootstrap, "Refits behind the loss intervals")
      ->capture_default_str();
  cmd->add_option("--seed", p.seed, "Seed of the refits")->capture_default_str();
  cmd->add_option("--plot", p.plot, "Draw the two views' losses to this SVG (gnuplot)");
  cmd->add_option("--csv", p.csv, "Law points (as xmod fit --csv reads) instead of a sweep")
      ->check(CLI::ExistingFile);
  cmd->add_option("--law", p.law, "The law whose columns the CSV has")->capture_default_str();
  cmd->add_flag("--extrapolate", p.extrapolate,
                "Answer for candidates far outside the fitted runs (marked)");
  cmd->add_option("--format", p.format, "Output format: table or json")->capture_default_str();
}

absl::Status PlanSweep(const Flags& f, std::ostream& out) {
  if (f.plan.sweep.empty() && f.plan.csv.empty()) {
    return absl::InvalidArgumentError(
        "xmod plan: name a sweep (xmod plan SWEEP --db FILE --cluster FILE --gpu-hours H "
        "--context T), or use predict, calibrate or layout");
  }
  return RunPlanSweep(f.plan, out);
}
absl::Status PlanPredict(const Flags& f, std::ostream& out) { return RunPlanPredict(f.plan, out); }
absl::Status PlanCalibrate(const Flags& f, std::ostream& out) {
  return RunPlanCalibrate(f.plan, out);
}
absl::Status PlanLayout(const Flags& f, std::ostream& out) { return RunPlanLayout(f.plan, out); }

absl::Status Fit(const Flags& f, std::ostream& out) { return RunFitCommand(f.fit, out); }
absl::Status Plot(const Flags& f, std::ostream& out) { return RunPlotCommand(f.plot, out); }
absl::Status AdviseCommand(const Flags& f, std::ostream& out) {
  return RunAdviseCommand(f.advise, out);
}

// The table of commands: name (a space for a subcommand of a group), help, flags,
// and what it runs. `xmod run` prints its own failures and returns its exit code.
struct Command {
  const char* name;
  const char* help;
  void (*flags)(CLI::App*, Flags&);
  absl::Status (*run)(const Flags&, std::ostream&);
};

const Command kCommands[] = {
    {"expand", "Resolve a sweep's grid into jobs without running", ExpandFlags, Expand},
    {"check", "Can this sweep identify its laws? FLOP matching, layouts, budgets, replicates",
     CheckFlags, Check},
    {"submit", "Validate, expand and record a sweep", SubmitFlags, Submit},
    {"status", "Jobs per state, for one sweep or all", StatusFlags, Status},
    {"results", "One row per job: axes, sizes, status, losses", ResultsFlags, Results},
    {"curves", "One job's curve: step, tokens, FLOPs, metrics", CurvesFlags, Curves},
    {"sql", "Run one read-only SQL query on the database", SqlFlags, Sql},
    {"export",
     "Write a job's newest checkpoint as safetensors with a config.json, for other tools "
     "(docs/export.md)",
     ExportFlags, Export},
    {"resume", "Move a sweep's failed and cancelled jobs, or one job, to pending", ResumeFlags,
     Resume},
    {"tag", "Show or change a sweep's tags and note", TagFlags, Tag},
    {"compare", "Two sweeps' losses on the configurations they share", CompareFlags, Compare},
    {"cancel", "Cancel a sweep's unfinished jobs, or one job", CancelFlags, Cancel},
    {"serve", "Run the coordinator (gRPC) over a SQLite file", ServeFlags, Serve},
    {"dashboard", "Serve the read-only web dashboard over a SQLite file", DashboardFlags,
     Dashboard},
    {"fit", "Fit a scaling law to a sweep's final losses (or to a CSV file) and store it", FitFlags,
     Fit},
    {"advise",
     "Which configuration to train at a compute and context: predicted losses with intervals, "
     "gain over dense, P(best), competing forms, decision hold-out",
     AdviseFlags, AdviseCommand},
    {"plot", "Draw a sweep's plots (gnuplot): curves, laws, ratios", PlotFlags, Plot},
    {"run", "Run a sweep here: in-process coordinator, local worker groups, live progress",
     RunFlags, nullptr},
    {"data prepare", "Turn text files into tokens (bytes or SentencePiece)", PrepareFlags,
     DataPrepare},
    {"data import", "Turn nanoGPT, llm.c, Megatron or raw token files into a dataset", ImportFlags,
     DataImport},
    {"data stats", "Token counts and unigram entropy of a dataset", StatsFlags, DataStats},
    {"plan",
     "Which architecture to train with GPU-hours on a cluster: the sweep's laws, each "
     "candidate's best layout and throughput, wall-clock vs FLOPs-only optimum "
     "(docs/planner.md)",
     PlanSweepFlags, PlanSweep},
    {"plan predict",
     "Predicted throughput, MFU, step-time split and memory per configuration on a cluster",
     PlanPredictFlags, PlanPredict},
    {"plan calibrate", "Fit a cluster profile's efficiencies to measured throughput",
     PlanCalibrateFlags, PlanCalibrate},
    {"plan layout", "The fastest parallel layout that fits a model on N GPUs, and runners-up",
     PlanLayoutFlags, PlanLayout},
};

// Registers every command of the table; returns each one's parser, in table order.
std::vector<CLI::App*> Register(CLI::App& app, Flags& f) {
  std::map<std::string, CLI::App*> groups;
  std::vector<CLI::App*> parsers;
  std::map<std::string, CLI::App*> top;  // commands without a space, by name
  for (const Command& c : kCommands) {
    const std::string name = c.name;
    const size_t space = name.find(' ');
    CLI::App* parent = &app;
    if (space != std::string::npos) {
      const std::string group = name.substr(0, space);
      if (groups.count(group) == 0 && top.count(group) > 0) {
        // A command that is also a group (xmod plan SWEEP, xmod plan predict).
        groups[group] = top[group];
        groups[group]->require_subcommand(0, 1);
      } else if (groups.count(group) == 0) {
        groups[group] = app.add_subcommand(group, "Token datasets");
        groups[group]->require_subcommand(1);
      }
      parent = groups[group];
    }
    CLI::App* cmd =
        parent->add_subcommand(space == std::string::npos ? name : name.substr(space + 1), c.help);
    c.flags(cmd, f);
    if (space == std::string::npos) top[name] = cmd;
    parsers.push_back(cmd);
  }
  return parsers;
}

}  // namespace

// What `xmod --version` prints: the build, then the libraries the store and the
// coordinator run on.
std::string XmodVersionText() {
  return absl::StrCat(VersionLine("xmod"), "\nSQLite ", sqlite3_libversion(), ", gRPC ",
                      grpc::Version(), ", Protobuf ",
                      google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION));
}

int RunXmod(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"xmod: scaling-law sweeps for sparse-depth (X-MoD) language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", XmodVersionText,
                       "Print the build and its libraries, then exit");
  Flags f;
  const std::vector<CLI::App*> parsers = Register(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    app.exit(e, out, err);
    return kExitUsage;
  }
  f.err = &err;
  for (size_t i = 0; i < parsers.size(); ++i) {
    // A group's own parser is parsed too when one of its subcommands is.
    if (!parsers[i]->parsed() || !parsers[i]->get_subcommands().empty()) continue;
    const Command& c = kCommands[i];
    if (c.run == nullptr) {  // xmod run
      f.run.tty = ::isatty(STDOUT_FILENO);
      std::signal(SIGINT, OnServeSignal);
      std::signal(SIGTERM, OnServeSignal);
      return RunLocalSweep(f.run, out, err);
    }
    const absl::Status result = c.run(f, out);
    if (!result.ok()) {
      const std::string name = c.name;
      err << result.message() << "\n";
      err << "xmod " << name << ": "
          << (ExitCodeFor(result) == kExitUsage ? "invalid input" : "failed")
          << (name == "plot" ? "\n" : "; nothing was written\n");
    }
    return ExitCodeFor(result);
  }
  return kExitUsage;
}

}  // namespace xmod
