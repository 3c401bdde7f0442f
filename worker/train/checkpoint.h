// Checkpoints of a training run: RUN_DIR/checkpoints/step_00000123/ holding
// model.pt, optimizer.pt and meta.json (step, job id, FNV-1a checksum of each
// file). A checkpoint is written into a ".tmp" folder and renamed when complete,
// so a crash never leaves a half checkpoint that looks whole; checksums are
// verified on load, and a damaged newest checkpoint falls back to the one before.
#ifndef XMOD_WORKER_TRAIN_CHECKPOINT_H_
#define XMOD_WORKER_TRAIN_CHECKPOINT_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model.h"

namespace xmod {

// Writes the checkpoint of `step` and removes all but the newest `keep` ones,
// never the one of `protect_step` (the newest the coordinator recorded: where the
// next attempt resumes, even when later ones were written during an outage), nor
// those of `keep_steps` (a trunk's branch starts).
absl::Status SaveCheckpoint(const std::string& run_dir, const std::string& job_id, int64_t step,
                            Decoder& model, torch::optim::Optimizer& optimizer, int keep = 2,
                            int64_t protect_step = -1, const std::vector<int64_t>& keep_steps = {});

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string path;
  std::vector<std::string> skipped;  // damaged checkpoints passed over, with the reason
};

// Loads the newest checkpoint of `job_id` whose checksums verify and whose step is
// at most `max_step` (any step when negative). NOT_FOUND when there is none
// (damaged ones are listed in the message).
absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& run_dir,
                                                      const std::string& job_id, Decoder& model,
                                                      torch::optim::Optimizer& optimizer,
                                                      int64_t max_step = -1);

// The folder a checkpoint of `step` is (or would be) written to.
std::string CheckpointDir(const std::string& run_dir, int64_t step);

// FNV-1a 64 of a file's bytes as 16 hex digits; NOT_FOUND when unreadable.
absl::StatusOr<std::string> FileChecksum(const std::string& path);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_CHECKPOINT_H_
