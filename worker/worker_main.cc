// `mpirun -np R xmod-worker --coordinator ADDR`: one worker group per MPI world.
// Exit codes: 0 done or stopped; 1 an error; 2 bad arguments; 75 the coordinator
// did not answer for --unreachable-timeout seconds.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "proto/channel.h"
#include "worker/client/worker_group.h"
#include "worker/dist/communicator.h"
#include "worker/train/trainer.h"

namespace {

void OnSignal(int) { xmod::RequestStop(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xmod-worker: a worker group (one MPI world) that trains jobs from a coordinator"};
  xmod::WorkerGroupOptions o;
  std::string token_file;
  auto* address = app.add_option("--coordinator", o.coordinator, "Coordinator address host:port");
  auto* file = app.add_option("--coordinator-file", o.coordinator_file,
                              "File holding the coordinator's host:port (xmod serve "
                              "--address-file), read again while the coordinator is unreachable");
  address->excludes(file);
  file->excludes(address);
  app.add_option("--unreachable-timeout", o.unreachable_seconds,
                 "Seconds without an answer from the coordinator after which the group "
                 "checkpoints and exits with code 75, freeing its allocation (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--token-file", token_file, "File holding the bearer token");
  app.add_option("--tls-ca", o.tls_ca, "CA certificate (PEM) to verify a TLS coordinator");
  app.add_option("--run-dir", o.run_dir, "Shared folder for checkpoints and metric logs")
      ->capture_default_str();
  app.add_option("--name", o.name, "Label for this group's worker id");
  app.add_flag("--exit-when-idle", o.exit_when_idle, "Exit as soon as nothing can be leased");
  app.add_option("--threads", o.threads,
                 "LibTorch threads per rank (0: the CPUs this process may use / its ranks on the "
                 "node, or SLURM_CPUS_PER_TASK)");
  int pack = 0;
  app.add_option("--pack", pack,
                 "Split this launch into sub-groups of N ranks that lease and train different "
                 "jobs at once (MPI only; N must divide the launch; 0: one group)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--poll-seconds", o.poll_seconds, "Wait between lease attempts when idle")
      ->capture_default_str();
  app.set_version_flag(
      "--version", [] { return xmod::WorkerVersionText("xmod-worker", xmod::DefaultDevice()); },
      "Print the build, its libraries and the device, then exit");
  app.add_option("--stall-timeout", o.stall_seconds,
                 "Seconds without a training step after which the group reports the job "
                 "failed and exits (0: never)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    if (o.coordinator.empty() && o.coordinator_file.empty()) {
      throw CLI::RequiredError("--coordinator or --coordinator-file");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!token_file.empty()) {
    auto token = xmod::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << token.status().message() << "\n";
      return 2;
    }
    o.token = *token;
  }
  // Every rank handles the signals (mpirun and srun deliver them to all ranks);
  // only rank 0's flag decides, and the decision is broadcast.
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGUSR2, OnSignal);
  std::signal(SIGINT, OnSignal);
  o.device = xmod::DefaultDevice();
  auto comm = xmod::MakeCommunicatorFor(o.device, /*under_mpi=*/true, pack);
  if (!comm.ok()) {
    std::cerr << comm.status().message() << "\n";
    return absl::IsInvalidArgument(comm.status()) || absl::IsUnimplemented(comm.status()) ? 2 : 1;
  }
  if (pack > 0) {
    // Each sub-group registers as a worker group of its own: "NAME-gK".
    const char* world = std::getenv("OMPI_COMM_WORLD_RANK");
    const int sub_group = (world != nullptr ? std::atoi(world) : 0) / pack;
    o.name = absl::StrCat(o.name.empty() ? "pack" : o.name, "-g", sub_group);
  }
  absl::Status s = xmod::RunWorkerGroup(o, **comm);
  if (!s.ok()) {
    std::cerr << (*comm)->Where() << ": " << s.message() << "\n";
    // 75 (EX_TEMPFAIL): no coordinator answered; a batch script may requeue the group.
    return absl::IsUnavailable(s) ? 75 : 1;
  }
  return 0;
}
