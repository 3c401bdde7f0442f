// `xmod export JOB_ID --db FILE --out DIR`: a finished (or stopped) job's weights
// for other tools. The store gives the job's resolved file and where its
// checkpoints are; xmod-train (which has LibTorch) reads the newest one and
// writes DIR/model.safetensors and DIR/config.json (docs/export.md).
#ifndef XMOD_ORCHESTRATOR_LAUNCH_EXPORT_JOB_H_
#define XMOD_ORCHESTRATOR_LAUNCH_EXPORT_JOB_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "orchestrator/store/store_reader.h"

namespace xmod {

struct ExportOptions {
  std::string job;
  std::string out;     // the folder the files go to
  std::string format;  // "safetensors" (the only one)
  // RUN_DIR of the job's runs (its checkpoints are RUN_DIR/JOB_ID/checkpoints);
  // empty: from the newest checkpoint the store recorded for it.
  std::string run_dir;
  // The xmod-train that reads the checkpoint; empty: the one beside this binary.
  std::string train_binary;
};

// Runs the export and prints xmod-train's line. NOT_FOUND for an unknown job or
// one without a recorded checkpoint (and no --run-dir); INVALID_ARGUMENT for a
// format other than safetensors; FAILED_PRECONDITION when xmod-train cannot run
// or fails (its output in the message).
absl::Status ExportJobWeights(StoreReader& store, const ExportOptions& options, std::ostream& out);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_LAUNCH_EXPORT_JOB_H_
