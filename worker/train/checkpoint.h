// Checkpoints of a training run: RUN_DIR/checkpoints/step_00000123/ holding
// model.pt, optimizer.pt and meta.json (step, job id, the writer's fencing token,
// the XXH3 checksum of each file, computed while the file is written; verified
// in blocks on load, never on an in-memory copy). A checkpoint is written into a temporary folder
// of its own writer (step_00000123.tmp-TOKEN) and published by a rename that
// never replaces a newer holder's folder, so two groups that both believe they
// hold a job never write the same path, and a crash never leaves a half
// checkpoint that looks whole. Checksums are verified on load, and a damaged
// newest checkpoint falls back to the one before.
#ifndef XMOD_WORKER_TRAIN_CHECKPOINT_H_
#define XMOD_WORKER_TRAIN_CHECKPOINT_H_

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model.h"

namespace xmod {

// How one checkpoint is written and published.
struct CheckpointWrite {
  // The writer's fencing token (0: a run without a coordinator). It names the
  // temporary folder and is stored in meta.json; a published folder is replaced
  // only by a writer with a token at least as high (a later attempt of the job).
  int64_t token = 0;
  // Asked once the files are complete, before publishing: whether the writer
  // still holds the job. False: the temporary folder is removed and the save is
  // ABORTED. Unset: always publish.
  std::function<bool()> may_publish;
  // Fault injection for tests: called once the files are complete, before
  // may_publish (a frozen holder wakes here).
  std::function<void()> written;
};

// Writes the checkpoint of `step` and publishes it as CheckpointDir(run_dir, step).
// ABORTED when the writer no longer holds the job: may_publish said so, or the
// step's folder was published by a writer with a higher token; nothing of this
// writer's is left on disk then. INTERNAL on an I/O failure.
absl::Status SaveCheckpoint(const std::string& run_dir, const std::string& job_id, int64_t step,
                            Decoder& model, torch::optim::Optimizer& optimizer,
                            const CheckpointWrite& write = {});

// Removes all but the newest `keep` checkpoints, never the one of `protect_step`
// (the newest the coordinator recorded: where the next attempt resumes, even when
// later ones were written during an outage), nor those of `keep_steps` (a trunk's
// branch starts), nor any folder a writer with a higher token than `token`
// published; also the temporary folders of writers with lower tokens (attempts
// that ended) and folders set aside by a publish. Call it only after the
// coordinator recorded this writer's checkpoint: a holder that lost its lease
// must not delete what the new holder resumes from.
void PruneCheckpoints(const std::string& run_dir, int keep, int64_t protect_step,
                      const std::vector<int64_t>& keep_steps, int64_t token);

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

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_CHECKPOINT_H_
