// Exports a job's trained weights for other tools: the safetensors layout
// (https://github.com/huggingface/safetensors, "Format"), which Hugging Face's
// libraries, llama.cpp's converters and most inference servers read, and a
// config.json with the architecture. docs/export.md states the layout.
#ifndef XMOD_WORKER_TRAIN_EXPORT_H_
#define XMOD_WORKER_TRAIN_EXPORT_H_

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_file.h"

namespace xmod {

// Writes `tensors` (name, tensor; any device, made contiguous on the CPU) as one
// safetensors file: an 8-byte little-endian header length N, N bytes of JSON
// (each name's dtype, shape and [begin, end) byte offsets into the data, and
// "__metadata__" with `metadata`), padded with spaces to a multiple of 8, then
// the tensors' bytes in the header's order. Written to a temporary file and
// renamed. INVALID_ARGUMENT for a dtype safetensors has no name for or a
// repeated name; INTERNAL on an I/O failure.
absl::Status WriteSafetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::string& path);

struct ExportResult {
  int64_t step = 0;     // the checkpoint's step
  int64_t tensors = 0;  // how many were written
  int64_t bytes = 0;    // the weights file's size
  std::string weights;  // OUT_DIR/model.safetensors
  std::string config;   // OUT_DIR/config.json
};

// Loads the newest checkpoint of `job` under `job_run_dir` (RUN_DIR/JOB_ID)
// whose checksums verify, and writes OUT_DIR/model.safetensors (every parameter
// and buffer of the model, by its module path, in the dtype it was trained in)
// and OUT_DIR/config.json (the architecture; the whole job file under "xmod_job").
// NOT_FOUND when the job has no usable checkpoint.
absl::StatusOr<ExportResult> ExportJob(const JobFile& job, const std::string& job_run_dir,
                                       const std::string& out_dir);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_EXPORT_H_
