#include "orchestrator/launch/local_run.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cpus.h"
#include "common/status_macros.h"
#include "orchestrator/coordinator/coordinator.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/report/slopes.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/service/server.h"
#include "orchestrator/sweep/design_check.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

extern char** environ;

namespace xmod {

namespace {

std::atomic<bool> g_interrupted{false};

std::string Bar(double fraction, int width) {
  const int filled = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * width));
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = std::llround(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace

std::string SelfDirectory() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

void InterruptLocalRun() { g_interrupted = true; }

std::vector<pid_t> ProcessTree(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: the command may hold spaces, so parse after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    children.emplace(ppid, static_cast<pid_t>(std::stol(name)));
  }
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i) {
    auto range = children.equal_range(tree[i]);
    for (auto it = range.first; it != range.second; ++it) tree.push_back(it->second);
  }
  return tree;
}

void SignalTree(pid_t root, int sig) {
  for (pid_t p : ProcessTree(root)) ::kill(p, sig);
}

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: signals reach every rank
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

absl::StatusOr<HelperRun> RunHelper(const std::vector<std::string>& argv) {
  char pattern[] = "/tmp/xmod-helper-XXXXXX";
  const int fd = ::mkstemp(pattern);
  if (fd < 0) return absl::InternalError("cannot make a temporary file under /tmp");
  ::close(fd);
  const std::string log = pattern;
  auto pid = SpawnProcess(argv, log);
  int status = 0;
  absl::Status result = pid.status();
  if (pid.ok() && ::waitpid(*pid, &status, 0) < 0) {
    result = absl::InternalError(absl::StrCat("waiting for ", argv.front(), " failed"));
  }
  HelperRun run;
  {
    std::ifstream in(log);
    run.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove(log);
  RETURN_IF_ERROR(result);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

std::vector<std::string> GroupMpirunPrefix(const LocalRunOptions& o, int cores) {
  std::vector<std::string> argv = {o.mpirun, "-np", std::to_string(o.ranks), "--bind-to", "none"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  if (o.groups * o.ranks > cores) argv.push_back("--oversubscribe");
  return argv;
}

namespace {

// One `xmod run`: the phases of RunLocalSweep, in order, over shared state.
class LocalRun {
 public:
  LocalRun(const LocalRunOptions& options, std::ostream& out, std::ostream& err)
      : o(options), out(out), err(err) {}

  // Parse, expand, design-check and check the ranks; nothing is written.
  absl::Status Prepare();
  // Open the coordinator's store, submit through its scheduler, then serve.
  absl::Status StartCoordinator();
  absl::Status StartGroups();
  // Redraws progress until nothing is active or every group has exited.
  void WatchProgress();
  // Lets the groups leave (SIGKILL after 30 s), then stops the coordinator.
  void StopGroups();
  // The results table, the laws (when runs support them) and the closing line.
  int Report();
  void ReportDecision();

  int Fail(const absl::Status& s) {
    err << s.message() << "\n";
    const bool usage = absl::IsInvalidArgument(s) || absl::IsNotFound(s);
    err << "xmod run: " << (usage ? "invalid input" : "failed") << "\n";
    return usage ? 2 : 1;
  }

 private:
  // One progress frame: the sweep line and a line per job in flight.
  std::string Frame(const SweepSummary& summary, const std::vector<JobProgressRow>& jobs,
                    double elapsed, double eta) const;
  void InterruptGroups();

  const LocalRunOptions& o;
  std::ostream& out;
  std::ostream& err;
  SweepSpec spec;
  std::string db_path;
  std::unique_ptr<Coordinator> coordinator;  // in-process: store, order, scheduler, servers
  std::vector<pid_t> groups;                 // negated once reaped
};

absl::Status LocalRun::Prepare() {
  ASSIGN_OR_RETURN(spec, LoadSweepSpec(o.spec_path));
  ASSIGN_OR_RETURN(std::vector<ResolvedJob> jobs, ExpandSweep(spec, o.max_jobs));
  const DesignReport design = CheckDesign(spec, jobs);
  RETURN_IF_ERROR(DesignStatus(design, o.spec_path, o.allow_unidentifiable));
  for (const DesignFinding& d : design.findings) {
    err << o.spec_path << ":" << d.line << ": " << d.field << ": "
        << (d.error ? "error (allowed): " : "warning: ") << d.message << "\n";
  }
  err << SizingReport(jobs);
  if (o.groups < 1 || o.ranks < 1) {
    return absl::InvalidArgumentError("--groups and --ranks must be at least 1");
  }
  for (const ResolvedJob& job : jobs) {
    if (job.file.batch_size % o.ranks != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ranks ", o.ranks, ": job ", job.file.id, " has ", job.file.batch_size,
                       " sequences per step, which do not split over ", o.ranks, " ranks"));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalRun::StartCoordinator() {
  RETURN_IF_ERROR(CheckLeaseTtl(o.lease_ttl_seconds, "--lease-ttl"));
  CoordinatorOptions options;
  options.db = db_path = o.db.empty() ? spec.name + ".db" : o.db;
  options.server.listen = "127.0.0.1:0";
  options.lease_ttl_seconds = o.lease_ttl_seconds;
  options.max_jobs = o.max_jobs;
  options.http = o.http;
  options.log = [this](const std::string& line) { out << line + "\n" << std::flush; };
  ASSIGN_OR_RETURN(coordinator, Coordinator::Open(options));
  // Submitted before the coordinator serves, so that its first refit (a resumed
  // run steers from the results it already has) sees this sweep.
  ASSIGN_OR_RETURN(
      SubmitResult submitted,
      coordinator->scheduler().Submit(spec.yaml_text, o.spec_path, o.allow_unidentifiable));
  RETURN_IF_ERROR(coordinator->Serve());
  out << fmt::format("xmod run: sweep '{}' in {}: {} jobs ({} new); coordinator on {}\n", spec.name,
                     db_path, submitted.jobs_in_spec, submitted.new_jobs,
                     coordinator->server().address());
  if (coordinator->dashboard() != nullptr) {
    out << fmt::format("xmod run: dashboard on http://{}/\n", coordinator->dashboard()->address());
  }
  return absl::OkStatus();
}

absl::Status LocalRun::StartGroups() {
  std::filesystem::create_directories(o.run_dir + "/logs");
  // The CPUs this process may use (its affinity: a cpuset, taskset, an allocation),
  // shared by every rank of every group.
  const int cores = AllowedCpus();
  const int threads = o.threads > 0 ? o.threads : std::max(1, cores / (o.groups * o.ranks));
  const std::string worker =
      o.worker_binary.empty() ? SelfDirectory() + "/xmod-worker" : o.worker_binary;
  for (int g = 0; g < o.groups; ++g) {
    std::vector<std::string> argv = GroupMpirunPrefix(o, cores);
    for (const std::string& a :
         {worker, std::string("--coordinator"), coordinator->server().address(),
          std::string("--run-dir"), o.run_dir, std::string("--threads"), std::to_string(threads),
          std::string("--name"), absl::StrCat("local", g), std::string("--poll-seconds"),
          std::string("0.5")}) {
      argv.push_back(a);
    }
    auto pid = o.launch(argv, absl::StrCat(o.run_dir, "/logs/group-", g, ".log"));
    if (!pid.ok()) {
      for (pid_t p : groups) SignalTree(p, SIGKILL);
      return pid.status();
    }
    groups.push_back(*pid);
  }
  out << fmt::format(
      "xmod run: {} worker group(s) of {} rank(s), {} thread(s) per rank; logs in {}/logs\n",
      o.groups, o.ranks, threads, o.run_dir);
  return absl::OkStatus();
}

std::string LocalRun::Frame(const SweepSummary& summary, const std::vector<JobProgressRow>& jobs,
                            double elapsed, double eta) const {
  const StateCounts& c = summary.states;
  const double done = summary.flops.done, total = summary.flops.total;
  std::string text = fmt::format(
      "{} {} {:5.1f}% of {:.3g} FLOPs | {} done, {} running, {} pending, {} failed | "
      "{} elapsed, ETA {}\n",
      spec.name, Bar(total > 0 ? done / total : 1.0, 30), total > 0 ? 100 * done / total : 100.0,
      total, c.counts.at(JobState::kSucceeded),
      c.counts.at(JobState::kRunning) + c.counts.at(JobState::kLeased),
      c.counts.at(JobState::kPending), c.counts.at(JobState::kFailed), Duration(elapsed),
      Duration(eta));
  for (const JobProgressRow& p : jobs) {
    if (!p.in_flight()) continue;
    text +=
        fmt::format("  {} {:<5} {:<4} sparsity {:<5} stride {} T {:<5} {} {}/{} (attempt {})\n",
                    p.job_id, p.family, p.scale, p.sparsity, p.stride, p.context,
                    Bar(p.steps ? double(p.step) / p.steps : 0.0, 20), p.step, p.steps, p.attempt);
  }
  return text;
}

// To the ranks, not mpirun: mpirun would tear the job down before rank 0 has
// checkpointed; the ranks stop cleanly and mpirun exits after them.
void LocalRun::InterruptGroups() {
  out << "xmod run: interrupted; worker groups checkpoint and stop\n";
  for (pid_t p : groups) {
    if (p <= 0) continue;
    const std::vector<pid_t> tree = ProcessTree(p);
    for (size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGTERM);
  }
}

void LocalRun::WatchProgress() {
  const auto start = std::chrono::steady_clock::now();
  double flops_at_start = -1;
  int drawn = 0;
  auto last_print = start - std::chrono::hours(1);
  bool interrupted_sent = false;
  while (true) {
    int alive = 0;
    for (pid_t& p : groups) {
      if (p <= 0) continue;
      int status = 0;
      if (::waitpid(p, &status, WNOHANG) == p) {
        p = -p;
      } else {
        ++alive;
      }
    }
    std::vector<JobProgressRow> jobs;
    auto summary = coordinator->scheduler().Status(spec.name, &jobs);
    if (!summary.ok()) break;
    const FlopProgress& flops = summary->front().flops;
    if (flops_at_start < 0) flops_at_start = flops.done;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    // ETA at the FLOP rate since this run started (progress.h).
    const double eta = elapsed > 1 ? EtaSeconds(flops, flops_at_start, elapsed).value_or(NAN) : NAN;
    int64_t active = 0;
    for (JobState state : StatesWhere(IsActive)) active += summary->front().states.counts.at(state);
    const bool finished = active == 0;
    if (o.tty || finished || now - last_print >= std::chrono::seconds(10)) {
      last_print = now;
      const std::string text = Frame(summary->front(), jobs, elapsed, eta);
      if (o.tty) {
        for (int i = 0; i < drawn; ++i) out << "\033[F\033[K";
        drawn = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      }
      out << text << std::flush;
    }
    if (finished || alive == 0) break;
    if (g_interrupted && !interrupted_sent) {
      InterruptGroups();
      interrupted_sent = true;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.refresh_seconds));
  }
}

void LocalRun::StopGroups() {
  // The groups leave by themselves once the coordinator says the sweep is done.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (pid_t p : groups) {
    if (p <= 0) continue;
    int status = 0;
    while (::waitpid(p, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        SignalTree(p, SIGKILL);
        ::waitpid(p, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  coordinator->server().Shutdown();
}

// The results table with the columns a reader of `xmod run` wants first.
QueryResult RunResultsTable(const QueryResult& results) {
  const std::vector<std::string> keep = {
      "job_id",          "family", "scale",  "sparsity", "stride",         "context",
      "n_params_active", "tokens", "status", "attempts", "final_val_loss", "final_val_loss_causal"};
  std::vector<size_t> index;
  for (const std::string& k : keep) {
    for (size_t i = 0; i < results.columns.size(); ++i) {
      if (results.columns[i] == k) index.push_back(i);
    }
  }
  QueryResult table;
  for (size_t i : index) table.columns.push_back(results.columns[i]);
  for (const auto& row : results.rows) {
    std::vector<Value> r;
    for (size_t i : index) r.push_back(row[i]);
    table.rows.push_back(std::move(r));
  }
  return table;
}

// What the finished runs say beyond the laws: the compute-matched paired
// differences with their seed error bars, the local slopes, and `xmod advise` at
// the largest compute the sweep ran (its first context).
void LocalRun::ReportDecision() {
  absl::StatusOr<std::vector<JobResultRow>> jobs = coordinator->store().JobResultRows(spec.name);
  if (!jobs.ok()) return;
  const QueryResult pairs = PairedDifferences(*jobs);
  if (!pairs.rows.empty()) {
    out << "\npaired differences (each routed configuration minus the dense runs of its scale, "
           "context and budget; causal loss; 95% from the pooled seed sd; xmod results --pairs "
           "has every column):\n";
    QueryResult shown;
    std::vector<size_t> keep;
    for (const char* column :
         {"family", "scale", "sparsity", "stride", "experts", "seeds", "dense_seeds", "difference",
          "diff_pct", "low_95", "high_95", "flops_ratio", "capacity_flag"}) {
      for (size_t i = 0; i < pairs.columns.size(); ++i) {
        if (pairs.columns[i] == column) keep.push_back(i);
      }
    }
    for (size_t i : keep) shown.columns.push_back(pairs.columns[i]);
    for (const auto& row : pairs.rows) {
      std::vector<Value> r;
      for (size_t i : keep) r.push_back(row[i]);
      shown.rows.push_back(std::move(r));
    }
    PrintResult(shown, Format::kTable, out);
  }
  const QueryResult slopes = LocalSlopes(*jobs);
  if (!slopes.rows.empty()) {
    out << "\nlocal slopes (model-free, between neighbouring N or D; xmod results --slopes):\n";
    PrintResult(slopes, Format::kTable, out);
  }
  std::vector<std::string> notes;
  absl::StatusOr<std::vector<LawPoint>> points = AdvicePoints(*jobs, PointOptions{}, &notes);
  if (!points.ok() || points->empty()) return;
  AdviseOptions advise;
  advise.bootstrap = 100;
  // Rounded down to the three digits printed, so that the command shown gives the
  // same advice (rounded up it would lie past some configuration's runs).
  const double largest = DefaultCompute(*points);
  const double unit = std::pow(10.0, std::floor(std::log10(largest)) - 2.0);
  advise.compute = std::floor(largest / unit) * unit;
  for (const LawPoint& x : *points) {
    if (advise.context == 0 || x.context < advise.context) advise.context = x.context;
  }
  if (absl::StatusOr<DesignFix> fix = SweepDesignFix(coordinator->store(), spec.name); fix.ok()) {
    advise.fixed = *fix;
  }
  out << fmt::format(
      "\nxmod advise {} --db {} --compute {:.3g} --context {:g} (the largest compute every "
      "configuration ran):\n",
      spec.name, db_path, advise.compute, advise.context);
  absl::StatusOr<Advice> advice = Advise(*points, advise);
  if (!advice.ok()) {
    out << "not advised: " << advice.status().message() << "\n";
    return;
  }
  advice->notes.insert(advice->notes.end(), notes.begin(), notes.end());
  PrintAdvice(*advice, out);
}

int LocalRun::Report() {
  if (auto results = coordinator->store().JobResults(spec.name); results.ok()) {
    out << "\n";
    PrintResult(RunResultsTable(*results), Format::kTable, out);
  }
  auto summary = coordinator->scheduler().Status(spec.name);
  if (!summary.ok()) return Fail(summary.status());
  const StateCounts& c = summary->front().states;
  const int64_t failed = c.counts.at(JobState::kFailed) + c.counts.at(JobState::kCancelled);
  int64_t left = 0;
  for (JobState state : StatesWhere(IsActive)) left += c.counts.at(state);
  // The laws, when the finished runs support them (stored in `fits` like `xmod fit`).
  if (c.counts.at(JobState::kSucceeded) > 0 && !g_interrupted) {
    // The laws the design check names (design.laws, else those that apply to
    // the sweep's families), as `xmod fit` would fit them.
    const std::vector<std::string> laws = SweepLaws(spec);
    for (const std::string& law : laws) {
      FitCommandOptions fit;
      fit.sweep = spec.name;
      fit.db = db_path;
      fit.law = law;
      out << "\n";
      const absl::Status fitted = RunFitCommand(fit, out);
      if (!fitted.ok())
        out << "xmod fit --law " << law << ": not fitted: " << fitted.message() << "\n";
    }
  }
  if (c.counts.at(JobState::kSucceeded) > 0 && !g_interrupted) ReportDecision();
  out << fmt::format("\nxmod run: {} succeeded, {} failed or cancelled, {} unfinished\n",
                     c.counts.at(JobState::kSucceeded), failed, left);
  if (left > 0 && !g_interrupted) {
    err << "xmod run: every worker group exited with jobs left; see " << o.run_dir << "/logs\n";
  }
  return failed > 0 || left > 0 ? 1 : 0;
}

}  // namespace

int RunLocalSweep(const LocalRunOptions& o, std::ostream& out, std::ostream& err) {
  LocalRun run(o, out, err);
  if (absl::Status s = run.Prepare(); !s.ok()) return run.Fail(s);
  if (absl::Status s = run.StartCoordinator(); !s.ok()) return run.Fail(s);
  if (absl::Status s = run.StartGroups(); !s.ok()) return run.Fail(s);
  run.WatchProgress();
  run.StopGroups();
  return run.Report();
}

}  // namespace xmod
