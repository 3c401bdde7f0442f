// A worker group: one MPI world that leases jobs from the coordinator and trains
// them data-parallel. Rank 0 talks gRPC (register, lease, heartbeat from a
// background thread, metric batches, checkpoints, results) and broadcasts each
// job to the other ranks; every rank trains.
//
// A lost coordinator is retried with backoff; the group does not die with it.
// A stale fencing token (the lease expired and the job moved on) makes the group
// drop the job and write nothing more. SIGTERM or SIGUSR2 (see RequestStop)
// checkpoints at the next step boundary, reports `preempted` and ends the group.
// A watchdog on rank 0 ends the group when no training step completes for
// `stall_seconds` (a rank stopped or hung in a collective, a dead filesystem):
// it reports the attempt failed (retryable) so the job is leased again at once,
// and exits; mpirun then takes the other ranks down.
#ifndef XMOD_WORKER_CLIENT_WORKER_GROUP_H_
#define XMOD_WORKER_CLIENT_WORKER_GROUP_H_

#include <string>

#include "absl/status/status.h"
#include "worker/dist/communicator.h"

namespace xmod {

struct WorkerGroupOptions {
  std::string coordinator;       // host:port
  std::string coordinator_file;  // or a file holding it, followed while unreachable
  // No answer from the coordinator for this long: the group checkpoints, stops and
  // RunWorkerGroup returns UNAVAILABLE, so that its allocation is freed (0: never).
  double unreachable_seconds = 900;
  std::string token;
  std::string tls_ca;
  std::string run_dir = "runs";  // shared by every group: RUN_DIR/JOB_ID/checkpoints
  std::string name;              // optional label for the worker id
  bool exit_when_idle = false;   // leave as soon as nothing can be leased
  int threads = 0;               // LibTorch threads per rank (0: cores / ranks)
  std::string device = "cpu";    // "cuda:<local rank>" on GPU nodes
  double poll_seconds = 1.0;     // wait between leases when idle
  int64_t metrics_batch = 256;   // points per ReportMetrics call (also flushed every 2 s)
  double stall_seconds = 1800;   // no step for this long ends the group (0: never)
};

// Runs until the coordinator says the sweeps are done (or, with exit_when_idle,
// until nothing can be leased), or a stop is requested. Every rank calls it.
// UNAVAILABLE: the coordinator did not answer for unreachable_seconds.
absl::Status RunWorkerGroup(const WorkerGroupOptions& options, Communicator& comm);

// Async-signal-safe: asks the group to checkpoint, report preempted and exit.
void RequestStop();

}  // namespace xmod

#endif  // XMOD_WORKER_CLIENT_WORKER_GROUP_H_
