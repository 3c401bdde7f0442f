// `xmod run`: the embedded default. Starts the coordinator in this process on a
// free loopback port over a SQLite file, submits the sweep, launches G worker
// groups of R ranks with mpirun, shows live progress, and ends with the results.
// Run again on the same database, it continues where it stopped.
#ifndef XMOD_ORCHESTRATOR_LAUNCH_LOCAL_RUN_H_
#define XMOD_ORCHESTRATOR_LAUNCH_LOCAL_RUN_H_

#include <sys/types.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/sweep/expand.h"

namespace xmod {

// Starts a command in its own process group with stdout and stderr sent to
// `log_path`; injected so that tests can see what would be launched.
using Launcher = std::function<absl::StatusOr<pid_t>(const std::vector<std::string>& argv,
                                                     const std::string& log_path)>;
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const std::string& log_path);

// Runs a helper binary to its end with stdout and stderr captured together:
// its exit code (128 + signal when killed) and everything it printed.
struct HelperRun {
  int exit_code = 0;
  std::string output;
};
absl::StatusOr<HelperRun> RunHelper(const std::vector<std::string>& argv);

// The folder of the running binary (where xmod-worker and xmod-train are
// installed beside xmod); "." when /proc cannot say.
std::string SelfDirectory();

struct LocalRunOptions {
  std::string spec_path;
  std::string db;  // default: <sweep name>.db
  int groups = 1;
  int ranks = 1;
  int threads = 0;  // per rank; 0: cores / (groups · ranks), at least 1
  double lease_ttl_seconds = 10.0;
  std::string run_dir = "runs";
  std::string worker_binary;  // default: xmod-worker beside this executable
  std::string mpirun = "mpirun";
  bool tty = false;                    // redraw progress in place
  bool allow_unidentifiable = false;   // run even when the design check fails
  int64_t max_jobs = kDefaultMaxJobs;  // refuse a sweep that expands to more jobs
  double refresh_seconds = 1.0;
  std::string http;  // the dashboard's loopback HOST:PORT while the run lasts (empty: none)
  Launcher launch = SpawnProcess;
};

// The mpirun command line of one local group, up to the worker binary. Every
// group is its own mpirun, blind to the others: left to bind, each would pin its
// rank 0 to core 0 and two groups on a two-core machine would share one core (the
// demo measured 2.3x slower). Local groups therefore run unbound (`--bind-to
// none`) and the kernel spreads them.
std::vector<std::string> GroupMpirunPrefix(const LocalRunOptions& options, int cores);

// Returns the exit code: 0 when every job of the sweep succeeded, 1 when any
// failed or the groups died with work left, 2 for an invalid sweep file.
int RunLocalSweep(const LocalRunOptions& options, std::ostream& out, std::ostream& err);

// `root` and all its descendants (from /proc), root first. mpirun puts every rank
// in a process group of its own, so signalling the group of mpirun is not enough.
std::vector<pid_t> ProcessTree(pid_t root);
// Sends `sig` to every process of ProcessTree(root).
void SignalTree(pid_t root, int sig);

// Async-signal-safe: stop the run (groups are told to checkpoint and stop).
void InterruptLocalRun();

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_LAUNCH_LOCAL_RUN_H_
