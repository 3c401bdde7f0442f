// The training loop of one job on one worker group: data -> forward/backward ->
// all-reduce -> clip -> step -> schedule -> report -> evaluate -> checkpoint.
// Every rank runs it in lockstep; rank 0 reports and writes checkpoints. On CPU
// the losses are bit-for-bit reproducible, across a stop and a resume included.
#ifndef XMOD_WORKER_TRAIN_TRAINER_H_
#define XMOD_WORKER_TRAIN_TRAINER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/memory.h"  // EvalRows
#include "worker/data/batches.h"
#include "worker/dist/communicator.h"
#include "worker/train/schedule.h"
#include "worker/train/train_result.h"

namespace xmod {

struct TrainerOptions {
  std::string run_dir;  // checkpoints/ and metrics.jsonl go here (shared by the ranks)
  bool resume = false;  // continue from the newest valid checkpoint of the job, if any
  // With resume: the newest valid checkpoint at or before this step (the one the
  // coordinator recorded); -1: the newest of all. Without one the run starts fresh,
  // which is safe: the steps it redoes overwrite the same metric rows.
  int64_t resume_step = -1;
  // A cooldown branch's trunk folder (its checkpoints/); empty: the sibling of
  // run_dir named after the trunk's id, as worker groups and `xmod run` lay them out.
  std::string parent_run_dir;
  int threads = 0;             // LibTorch intra-op threads; 0: cores / ranks on this host
  std::string device = "cpu";  // "cpu" or "cuda:N"
  // Stop after this step (0: never) with a checkpoint, as a preemption would.
  int64_t stop_after_step = 0;
  // Polled on rank 0 at every step boundary; true stops like stop_after_step.
  std::function<bool()> preempt;
  // Polled on rank 0 at every step boundary; true stops at once without a
  // checkpoint (the job is no longer this group's: lease lost or cancelled).
  std::function<bool()> abandon;
  // Asked on rank 0 before each checkpoint is written; false abandons like
  // `abandon` (nothing written). The worker group asks the coordinator, so a group
  // whose lease ran out while it was frozen does not write a checkpoint folder
  // the job's new holder may be using.
  // It is asked again once the files are complete, before the checkpoint is
  // published (a group frozen while writing wakes after its lease moved): false
  // removes what was written and abandons.
  std::function<bool()> confirm_checkpoint;
  // The attempt's fencing token (0: no coordinator): it names the checkpoint's
  // temporary folder and is kept in its meta.json (checkpoint.h), so two groups
  // that both believe they hold the job never write the same path.
  int64_t fencing_token = 0;
  // Called on rank 0 with the metrics of each step that reports any.
  std::function<void(const std::vector<Metric>&)> on_metrics;
  // Called on rank 0 after a checkpoint is complete on disk, with its folder;
  // returns whether the coordinator recorded it. The newest recorded checkpoint
  // (or the one the run resumed from) is never pruned. Unset: every one counts.
  std::function<bool(int64_t step, const std::string& path)> on_checkpoint;
  // Called on rank 0 after every completed step.
  std::function<void(int64_t step)> on_step;
  bool print_progress = false;  // a line per logged step on stdout (rank 0)
  // Fault injection for tests: called before each step with the model.
  std::function<void(int64_t step, torch::nn::Module& model)> fault_before_step;
  // Fault injection for tests: called on rank 0 once a checkpoint's files are
  // complete, before it is published.
  std::function<void(int64_t step)> fault_checkpoint_written;
};

// UNIMPLEMENTED for a job this worker cannot train as asked: a precision other
// than fp32 and bf16. Train checks it first (and, for bf16, that the device can
// compute in bf16: FAILED_PRECONDITION otherwise); the worker group checks it
// before broadcasting, so the attempt ends as a failure that is not retried.
absl::Status CheckWorkerCanRun(const JobFile& job);

// Trains `job` to its last step (or until stopped). Every eval_interval steps and at
// the last step it reports val_loss and val_loss_se (the standard error of the mean
// over windows; with two windows or more); routed families add val_loss_causal and
// val_loss_causal_se (threshold routing), and, when they have routed layers,
// val_capacity (top-k: k/T), val_capacity_causal (mean over routed layers of the
// fraction of tokens with sigmoid(r) > 0.5), val_capacity_causal_min and _max (over
// layers) and val_flops_ratio_causal (ForwardFlopsPerTokenAt the realised threshold
// capacities / ForwardFlopsPerToken at the nominal one). Interim evaluations use the
// eval_tokens windows, the last step the final_eval_tokens ones, exactly once.
// Errors: INVALID_ARGUMENT for a job that cannot be split over the ranks; INTERNAL
// for a LibTorch failure, naming the job, host and rank; collective failures as the
// communicator reports them.
absl::StatusOr<TrainResult> Train(const JobFile& job, const TokenSource& data, Communicator& comm,
                                  const TrainerOptions& options);

// This process's rank on its host (Open MPI, Slurm or torchrun variables; 0 alone).
int LocalRank();
// "cuda:<local rank>" when LibTorch sees a CUDA device, else "cpu".
std::string DefaultDevice();
// NCCL for a CUDA device when built with it; otherwise MPI under a launcher, or a
// single process. pack_ranks > 0 splits an MPI launch into sub-groups of that many
// ranks (MakeMpiCommunicator); refused for NCCL and for a single process.
absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicatorFor(const std::string& device,
                                                                  bool under_mpi,
                                                                  int pack_ranks = 0);

// Builds the data source a job names: its dataset folder or the synthetic source.
absl::StatusOr<std::unique_ptr<TokenSource>> OpenJobData(const JobFile& job);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_TRAINER_H_
