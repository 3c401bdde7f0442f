#include "orchestrator/launch/export_job.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/launch/local_run.h"

namespace xmod {

namespace fs = std::filesystem;

absl::Status ExportJobWeights(StoreReader& store, const ExportOptions& o, std::ostream& out) {
  if (o.format != "safetensors") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--format: '", o.format, "' is not a format xmod export writes (safetensors)"));
  }
  ASSIGN_OR_RETURN(JobRecord job, store.JobDetail(o.job));
  std::string run_dir = o.run_dir;
  if (run_dir.empty()) {
    if (job.checkpoints.empty()) {
      return absl::NotFoundError(
          absl::StrCat("job ", o.job,
                       " has no recorded checkpoint; pass --run-dir with the folder its runs "
                       "went to (RUN_DIR/",
                       o.job, "/checkpoints)"));
    }
    // RUN_DIR/JOB_ID/checkpoints/step_NNNNNNNN
    run_dir = fs::path(job.checkpoints.back().path).parent_path().parent_path().parent_path();
  }
  const std::string binary =
      o.train_binary.empty() ? SelfDirectory() + "/xmod-train" : o.train_binary;
  if (::access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(binary,
                     ": not found or not executable; xmod export reads checkpoints with "
                     "xmod-train (a build with LibTorch), beside xmod or named by "
                     "--train-binary"));
  }
  // The job file xmod-train reads, in a folder of its own.
  char pattern[] = "/tmp/xmod-export-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    return absl::InternalError("cannot make a temporary folder under /tmp");
  }
  const std::string tmp = pattern;
  const std::string job_file = tmp + "/job.json";
  std::ofstream(job_file) << job.config_json;
  auto run = RunHelper({binary, "--job", job_file, "--run-dir", run_dir, "--export", o.out});
  std::error_code ec;
  fs::remove_all(tmp, ec);
  RETURN_IF_ERROR(run.status());
  const std::string& text = run->output;
  if (run->exit_code != 0) {
    const std::string message = absl::StrCat(binary, " --export (job ", o.job, ", run dir ",
                                             run_dir, ") exited ", run->exit_code, ": ", text);
    return run->exit_code == 2 ? absl::NotFoundError(message)
                               : absl::FailedPreconditionError(message);
  }
  out << text;
  return absl::OkStatus();
}

}  // namespace xmod
