// `xmod-train --job JOB.json [--run-dir DIR] [--resume]`: trains one job without a
// coordinator, printing progress and writing metrics as JSON lines. Under mpirun
// every rank runs it and the ranks train data-parallel.
// `xmod-train --job JOB.json [--run-dir DIR] --export OUT_DIR`: writes the job's
// newest checkpoint as OUT_DIR/model.safetensors and OUT_DIR/config.json instead.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "worker/dist/communicator.h"
#include "worker/train/export.h"
#include "worker/train/trainer.h"

namespace {

bool UnderMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xmod-train: train one resolved job (a row of `xmod expand --format json`)"};
  std::string job_path, run_dir = "runs";
  xmod::TrainerOptions options;
  bool quiet = false;
  app.add_option("--job", job_path, "Job file (JSON)")->required();
  app.add_option("--run-dir", run_dir, "Where checkpoints/ and metrics.jsonl go (per job: DIR/ID)")
      ->capture_default_str();
  app.add_flag("--resume", options.resume, "Continue from the newest valid checkpoint");
  app.add_option("--threads", options.threads,
                 "LibTorch threads per rank (0: the CPUs this process may use / its ranks on the "
                 "node, or SLURM_CPUS_PER_TASK)");
  app.add_option("--stop-after-step", options.stop_after_step,
                 "Checkpoint and stop after this step, as a preemption would");
  app.add_flag("--quiet", quiet, "No progress lines");
  app.set_version_flag(
      "--version", [] { return xmod::WorkerVersionText("xmod-train", xmod::DefaultDevice()); },
      "Print the build, its libraries and the device, then exit");
  std::string export_dir;
  app.add_option("--export", export_dir,
                 "Train nothing: write the newest checkpoint as OUT_DIR/model.safetensors and "
                 "OUT_DIR/config.json (docs/export.md)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  auto job = xmod::LoadJobFile(job_path);
  if (!job.ok()) {
    std::cerr << job.status().message() << "\n";
    return 2;
  }
  if (!export_dir.empty()) {
    auto exported = xmod::ExportJob(*job, run_dir + "/" + job->id, export_dir);
    if (!exported.ok()) {
      std::cerr << "job " << job->id << ": export failed: " << exported.status().message() << "\n";
      return absl::IsNotFound(exported.status()) ? 2 : 1;
    }
    std::cout << "job " << job->id << ": step " << exported->step << ", " << exported->tensors
              << " tensors, " << exported->bytes << " bytes -> " << exported->weights << ", "
              << exported->config << "\n";
    return 0;
  }
  options.device = xmod::DefaultDevice();
  auto made = xmod::MakeCommunicatorFor(options.device, UnderMpi());
  if (!made.ok()) {
    std::cerr << made.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<xmod::Communicator> comm = std::move(*made);
  auto data = xmod::OpenJobData(*job);
  if (!data.ok()) {
    std::cerr << comm->Where() << ": job " << job->id << ": " << data.status().message() << "\n";
    return 2;
  }
  options.run_dir = run_dir + "/" + job->id;
  options.print_progress = !quiet && comm->rank() == 0;
  auto result = xmod::Train(*job, **data, *comm, options);
  if (!result.ok()) {
    std::cerr << result.status().message() << "\n";
    return 1;
  }
  if (comm->rank() == 0) {
    switch (result->outcome) {
      case xmod::TrainOutcome::kSucceeded:
        std::cout << "job " << job->id << ": finished " << result->step << " steps, val_loss "
                  << result->val_loss << ", val_loss_causal " << result->val_loss_causal << "\n";
        break;
      case xmod::TrainOutcome::kStopped:
        std::cout << result->message << " (resume with --resume)\n";
        break;
      case xmod::TrainOutcome::kDiverged:
        std::cerr << result->message << "\n";
        return 1;
    }
  }
  return 0;
}
