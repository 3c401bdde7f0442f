#include "worker/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/cpus.h"
#include "common/status_macros.h"
#include "worker/model/family/family.h"
#include "worker/model/model.h"
#include "worker/model/precision.h"
#include "worker/train/adamw.h"
#include "worker/train/checkpoint.h"
#include "worker/train/host_allocator.h"
#include "worker/train/job_model.h"
#include "worker/train/zero.h"

namespace xmod {

int LocalRank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

std::string DefaultDevice() {
  return torch::cuda::is_available() ? "cuda:" + std::to_string(LocalRank()) : "cpu";
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicatorFor(const std::string& device,
                                                                  bool under_mpi, int pack_ranks) {
  if (device.rfind("cuda", 0) == 0 && NcclCompiledIn()) {
    if (pack_ranks > 0) {
      return absl::UnimplementedError(
          "--pack splits an MPI launch; the NCCL communicator spans the whole launch: start "
          "one launch per group size on GPUs instead");
    }
    return MakeNcclCommunicator(LocalRank());
  }
  if (under_mpi) return MakeMpiCommunicator(64 << 20, pack_ranks);
  if (pack_ranks > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pack ", pack_ranks, " needs a launch of several ranks (mpirun)"));
  }
  return MakeSingleProcessCommunicator();
}

absl::StatusOr<std::unique_ptr<TokenSource>> OpenJobData(const JobFile& job) {
  if (job.data_path.empty()) {
    return MakeSyntheticSource(job.synthetic_seed, job.shape.vocab_size);
  }
  return OpenDatasetSource(job.data_path, job.shape.vocab_size);
}

DecoderOptions ModelOptionsFor(const JobFile& job) {
  const ModelShape& s = job.shape;
  DecoderOptions options =
      DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
          .family(s.family)
          .stride(s.stride)
          .routed_tokens(job.routed_tokens)
          .balance_coef(job.balance_coef)
          .router_coef(job.router_coef)
          .recompute(job.recompute)
          .family_options(job.family_options);
  const ModelFamily& family = ModelFamilyOf(s.family);
  if (family.configure != nullptr) family.configure(job, &options);
  return options;
}

std::unique_ptr<torch::optim::AdamW> MakeOptimizer(const JobFile& job,
                                                   const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  // The schedule sets every group's rate before each step; this one is a placeholder.
  auto base = torch::optim::AdamWOptions(1e-3).betas({job.beta1, job.beta2}).eps(1e-8);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(base).weight_decay(job.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(base).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), base);
}

namespace {

void SetLearningRate(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

// Rewrites metrics.jsonl without the rows past `step` (an earlier attempt's tail).
void TruncateMetrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= step) keep.push_back(line);
    } catch (const nlohmann::json::exception&) {
      // A torn last line from a crash: drop it.
    }
  }
  in.close();
  std::ofstream out(path + ".tmp", std::ios::trunc);
  for (const std::string& l : keep) out << l << "\n";
  out.close();
  std::filesystem::rename(path + ".tmp", path);
}

class Run {
 public:
  Run(const JobFile& job, const TokenSource& data, Communicator& comm, const TrainerOptions& o)
      : job_(job),
        data_(data),
        comm_(comm),
        o_(o),
        device_(o.device),
        bf16_(job.precision == "bf16"),
        sharded_(job.optimizer_sharding == "zero1" && comm.size() > 1) {}

  // The run, in the order it happens: set up, find the step to start from, then
  // per step: step, report, divergence, stop decision, checkpoint.
  absl::StatusOr<TrainResult> Go() {
    RETURN_IF_ERROR(Setup());
    ASSIGN_OR_RETURN(const std::optional<int64_t> agreed, StartStep());
    TrainResult result;
    if (!agreed) {
      result.outcome = TrainOutcome::kStopped;
      result.step = std::max<int64_t>(o_.resume_step, 0);
      result.message = absl::StrCat("job ", job_.id,
                                    ": abandoned before its first step (its "
                                    "lease moved while the group started)");
      return result;
    }
    const int64_t start = *agreed;
    recorded_step_ = start;
    result.resumed_from = start;
    result.step = start;
    if (start >= job_.steps) {
      // Resumed from the last step's checkpoint: its final evaluation was reported
      // before that checkpoint was written, so it is recomputed (same weights, same
      // windows, same values) for the result only, not reported a second time.
      std::vector<Metric> already_reported;
      RETURN_IF_ERROR(EvaluateInto(start, 0, 0.0, &already_reported, &result));
      result.outcome = TrainOutcome::kSucceeded;
      return result;
    }
    last_report_ = std::chrono::steady_clock::now();
    last_report_step_ = start;
    for (int64_t step = start + 1; step <= job_.steps; ++step) {
      const bool last = step == job_.steps;
      // -- Step.
      const double lr = LearningRate(job_, step);
      SetLearningRate(Optimizer(), lr);
      if (o_.fault_before_step) o_.fault_before_step(step, *model_);
      ASSIGN_OR_RETURN(StepStats stats, TrainStep(step));
      result.step = step;
      // -- Report: training metrics at log steps, an evaluation at eval steps (at
      // the last step the final evaluation, on final_starts_, replaces the interim one).
      const int64_t tokens = step * job_.tokens_per_step();
      const double flops = static_cast<double>(tokens) * job_.flops_per_token;
      std::vector<Metric> metrics;
      if (step % job_.log_interval == 0 || last) {
        metrics = TrainingMetrics(step, lr, stats, tokens, flops);
      }
      const bool finite_step = std::isfinite(stats.loss) && std::isfinite(stats.grad_norm);
      if (finite_step && (step % job_.eval_interval == 0 || last)) {
        RETURN_IF_ERROR(EvaluateInto(step, tokens, flops, &metrics, &result));
      }
      // -- Divergence, decided once: any non-finite loss, gradient norm or metric
      // ends the run before anything of this step is reported.
      if (std::optional<std::string> what = FirstNonFinite(stats, metrics)) {
        result.outcome = TrainOutcome::kDiverged;
        result.message =
            absl::StrCat("job ", job_.id, ": diverged at step ", step, " (", *what, ")");
        return result;
      }
      result.train_losses.push_back(stats.loss);
      if (comm_.rank() == 0 && !metrics.empty()) Report(metrics_path_, metrics);
      if (comm_.rank() == 0 && o_.on_step) o_.on_step(step);
      // -- Stop? Decided by rank 0 and shared, so every rank stops together.
      ASSIGN_OR_RETURN(const StopDecision stop, DecideStop(step, last));
      if (stop == StopDecision::kAbandon) {
        result.outcome = TrainOutcome::kStopped;
        result.message = absl::StrCat("job ", job_.id, ": abandoned after step ", step);
        return result;
      }
      // -- Checkpoint: at the interval, at the last step, and before a stop.
      const bool stopping = stop == StopDecision::kCheckpointAndStop && !last;
      if (CheckpointDue(step, last) || stopping) {
        ASSIGN_OR_RETURN(const bool held, Checkpoint(step));
        if (!held) {
          result.outcome = TrainOutcome::kStopped;
          result.message = absl::StrCat("job ", job_.id, ": abandoned at step ", step,
                                        " (its lease moved while the checkpoint was written)");
          return result;
        }
      }
      if (stopping) {
        result.outcome = TrainOutcome::kStopped;
        result.message = absl::StrCat("job ", job_.id, ": stopped after step ", step);
        return result;
      }
    }
    result.outcome = TrainOutcome::kSucceeded;
    return result;
  }

 private:
  struct StepStats {
    double loss = 0.0, grad_norm = 0.0;
    // What the model reports for the step, by name, in its order (DecoderImpl::AfterStep).
    std::vector<NamedValue> model_metrics;
  };

  // What rank 0 decides at each step boundary, broadcast to every rank.
  enum class StopDecision : char {
    kContinue = '0',
    kCheckpointAndStop = '1',  // preempted, drained, or stop_after_step reached
    kAbandon = '2',            // the job is no longer ours: stop, write nothing
  };

  // Checks the job against the ranks and the data, sizes the batches and the
  // evaluation windows, and builds the model and optimizer on every rank.
  absl::Status Setup() {
    const int world = comm_.size();
    if (job_.batch_size % world != 0) {
      return absl::InvalidArgumentError(absl::StrCat("job ", job_.id, ": ", job_.batch_size,
                                                     " sequences do not split over ", world,
                                                     " ranks"));
    }
    if (data_.train_size() <= job_.shape.context + 1 ||
        data_.val_size() <= job_.shape.context + 1) {
      return absl::InvalidArgumentError(absl::StrCat("job ", job_.id,
                                                     ": the data is shorter than one window of ",
                                                     job_.shape.context + 1, " tokens"));
    }
    // The default follows the CPUs this rank was given (common/cpus.h), not the
    // node's core count.
    torch::set_num_threads(o_.threads > 0 ? o_.threads : DefaultThreadsPerRank(LocalRanks(world)));
    rows_per_rank_ = job_.batch_size / world;
    micro_ = std::max<int64_t>(1, std::min(job_.micro_batch_size, rows_per_rank_));
    eval_rows_ = EvalRows(micro_, job_.shape.context, job_.shape.vocab_size);
    val_starts_ = ValWindowStarts(data_.val_size(), job_.shape.context,
                                  std::max<int64_t>(1, job_.eval_tokens / job_.shape.context));
    if (!job_.final_eval_tokens.has_value()) {
      final_starts_ = val_starts_;
    } else if (*job_.final_eval_tokens == 0) {
      final_starts_ = ValWindowStartsWhole(data_.val_size(), job_.shape.context);
    } else {
      final_starts_ =
          ValWindowStarts(data_.val_size(), job_.shape.context,
                          std::max<int64_t>(1, *job_.final_eval_tokens / job_.shape.context));
    }

    std::vector<torch::Tensor> params;
    try {
      torch::manual_seed(job_.seed);
      model_ = Decoder(ModelOptionsFor(job_));
      model_->to(device_);
      for (auto& p : model_->parameters()) params.push_back(p.data());
      if (sharded_) {
        zero_ = std::make_unique<ShardedAdamW>(model_->parameters(), comm_,
                                               [this](const std::vector<torch::Tensor>& subset) {
                                                 return MakeOptimizer(job_, subset);
                                               });
      } else {
        optimizer_ = MakeOptimizer(job_, model_->parameters());
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("job ", job_.id, " on ", comm_.Where(),
                       ": building the model: ", e.what_without_backtrace()));
    }
    for (const auto& layer : *model_->layers) {
      if (std::dynamic_pointer_cast<LayerImpl>(layer)->routed()) ++routed_layers_;
    }
    if (sharded_) {
      int64_t mine = 0, all = 0;
      const std::vector<torch::Tensor> ps = model_->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        all += ps[i].numel();
        if (zero_->owner(i) == comm_.rank()) mine += ps[i].numel();
      }
      if (comm_.rank() == 0) {
        std::cerr << "job " << job_.id << ": AdamW moments sharded over " << comm_.size()
                  << " ranks (ZeRO-1); rank 0 holds those of " << mine << " of " << all
                  << " parameters\n";
      }
    }
    // Ranks build identical weights from the seed; the broadcast makes it certain.
    RETURN_IF_ERROR(comm_.Broadcast(params, 0));

    return absl::OkStatus();
  }

  // The step to start from: the newest valid checkpoint at or before resume_step
  // (0: none), the same on every rank; metrics.jsonl is cut back to it.
  // The trunk's folder of a branch: TrainerOptions::parent_run_dir, or the sibling
  // of this job's folder named after the trunk.
  std::string ParentRunDir() const {
    if (!o_.parent_run_dir.empty()) return o_.parent_run_dir;
    return (std::filesystem::path(o_.run_dir).parent_path() / job_.parent).string();
  }

  // This rank's step to start from (see StartStep).
  absl::StatusOr<int64_t> FindStartStep() {
    int64_t start = 0;
    if (job_.is_branch() && !(o_.resume && o_.resume_step != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", job_.id, " is a cooldown branch of ", job_.parent, " from step ", job_.start_step,
          ": it starts from its trunk's checkpoint, so it must be resumed "
          "(xmod-train --resume), not started fresh"));
    }
    if (o_.resume && o_.resume_step != 0) {
      // Checkpoints hold the whole optimizer (zero.h): a sharded run loads it and
      // keeps its shard; an unsharded one may load a sharded run's (host moments).
      std::unique_ptr<torch::optim::AdamW> full =
          sharded_ ? MakeOptimizer(job_, model_->parameters()) : nullptr;
      auto loaded = LoadLatestCheckpoint(o_.run_dir, job_.id, model_,
                                         sharded_ ? *full : *optimizer_, o_.resume_step);
      if (absl::IsNotFound(loaded.status()) && job_.is_branch() &&
          (o_.resume_step < 0 || o_.resume_step == job_.start_step)) {
        // A cooldown branch with no checkpoint of its own starts from its trunk's
        // at start_step, in the trunk's folder beside this job's.
        const std::string trunk_dir = ParentRunDir();
        loaded = LoadLatestCheckpoint(trunk_dir, job_.parent, model_,
                                      sharded_ ? *full : *optimizer_, job_.start_step);
        if (loaded.ok() && loaded->step != job_.start_step) {
          return absl::DataLossError(absl::StrCat(
              "job ", job_.id, " on ", comm_.Where(), ": a cooldown branch starts from step ",
              job_.start_step, " of its trunk ", job_.parent, ", but ",
              CheckpointDir(trunk_dir, job_.start_step),
              " is missing or damaged (newest usable: step ", loaded->step, ")"));
        }
        if (!loaded.ok()) {
          return absl::DataLossError(absl::StrCat(
              "job ", job_.id, " on ", comm_.Where(), ": a cooldown branch starts from step ",
              job_.start_step, " of its trunk ", job_.parent, ": ", loaded.status().message()));
        }
      }
      if (loaded.ok()) {
        if (sharded_) {
          zero_->TakeShard(*full);
        } else {
          MoveOptimizerStateToParameters(*optimizer_);
        }
        start = loaded->step;
        for (const std::string& s : loaded->skipped) {
          std::cerr << comm_.Where() << ": skipped damaged checkpoint " << s << "\n";
        }
      } else if (!absl::IsNotFound(loaded.status())) {
        return loaded.status();
      }
      // The coordinator resumes an attempt from the checkpoint it recorded and
      // refuses rows at or before it: starting anywhere else (a pruned or damaged
      // checkpoint) could only be refused row by row, so say so once, here.
      if (o_.resume_step > 0 && start != o_.resume_step) {
        return absl::DataLossError(
            absl::StrCat("job ", job_.id, " on ", comm_.Where(),
                         ": the coordinator resumes it from step ", o_.resume_step, ", but ",
                         CheckpointDir(o_.run_dir, o_.resume_step), " is missing or damaged (",
                         loaded.ok() ? absl::StrCat("newest usable: step ", start)
                                     : std::string(loaded.status().message()),
                         ")"));
      }
    }
    return start;
  }

  // The step every rank starts from, or nullopt when a rank could not find it
  // and the group no longer holds the job: a holder stopped past its lease may
  // wake to find that the next holder has pruned the checkpoint it was resuming
  // from, which is the lease's loss, not a fault of the group (nothing is
  // written, and the group goes on). Every rank takes part in the agreement,
  // so a rank that fails alone no longer leaves the others in a collective.
  absl::StatusOr<std::optional<int64_t>> StartStep() {
    if (comm_.rank() == 0) std::filesystem::create_directories(o_.run_dir);
    const absl::StatusOr<int64_t> found = FindStartStep();
    const double start = found.ok() ? double(*found) : 0.0;
    // Every rank must continue from the same step (a damaged or pruned checkpoint
    // seen by one rank only would split them): compare through one all-reduce.
    std::vector<torch::Tensor> agree = {
        torch::tensor({found.ok() ? 0.0 : 1.0, start, start * start},
                      torch::dtype(torch::kFloat64).device(device_))};
    RETURN_IF_ERROR(comm_.AllReduceSum(agree));
    const torch::Tensor sums = agree[0].cpu();
    const double n = comm_.size(), failed = sums[0].item<double>(), sum = sums[1].item<double>(),
                 squares = sums[2].item<double>();
    if (failed > 0) {
      std::string held(1, 'h');
      if (comm_.rank() == 0 && o_.confirm_checkpoint && !o_.confirm_checkpoint()) held = "l";
      RETURN_IF_ERROR(comm_.Broadcast(&held, 0));
      if (held == "l") {
        if (!found.ok()) std::cerr << comm_.Where() << ": " << found.status().message() << "\n";
        return std::optional<int64_t>();
      }
      if (!found.ok()) return found.status();
      return absl::DataLossError(absl::StrCat("job ", job_.id, " on ", comm_.Where(), ": ", failed,
                                              " other rank(s) could not find the step to start "
                                              "from (this rank: step ",
                                              *found, ")"));
    }
    if (sum * sum != n * squares) {
      return absl::DataLossError(absl::StrCat("job ", job_.id, " on ", comm_.Where(),
                                              ": the ranks found different checkpoints (this "
                                              "rank: step ",
                                              *found, ")"));
    }
    if (comm_.rank() == 0) {
      if (*found > 0) {
        TruncateMetrics(metrics_path_, *found);
      } else {
        std::ofstream(metrics_path_, std::ios::trunc);
      }
    }
    RETURN_IF_ERROR(comm_.Barrier());
    return std::optional<int64_t>(*found);
  }

  std::vector<Metric> TrainingMetrics(int64_t step, double lr, const StepStats& stats,
                                      int64_t tokens, double flops) {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_report_).count();
    const double tps =
        seconds > 0 ? double((step - last_report_step_) * job_.tokens_per_step()) / seconds : 0.0;
    last_report_ = now;
    last_report_step_ = step;
    std::vector<Metric> metrics = {
        {"train_loss", step, stats.loss, tokens, flops},
        {"lr", step, lr, tokens, flops},
        {"grad_norm", step, stats.grad_norm, tokens, flops},
        {"tokens_per_s", step, tps, tokens, flops},
    };
    for (const NamedValue& v : stats.model_metrics) {
      metrics.push_back({v.name, step, v.value, tokens, flops});
    }
    return metrics;
  }

  // The first non-finite value of a step, named ("loss nan, grad norm nan",
  // "val_loss is inf"); nullopt when every value is finite.
  static std::optional<std::string> FirstNonFinite(const StepStats& stats,
                                                   const std::vector<Metric>& metrics) {
    if (!std::isfinite(stats.loss) || !std::isfinite(stats.grad_norm)) {
      return absl::StrCat("loss ", stats.loss, ", grad norm ", stats.grad_norm);
    }
    for (const Metric& m : metrics) {
      if (!std::isfinite(m.value)) return absl::StrCat(m.name, " is ", m.value);
    }
    return std::nullopt;
  }

  absl::StatusOr<StopDecision> DecideStop(int64_t step, bool last) {
    StopDecision stop = StopDecision::kContinue;
    if (comm_.rank() == 0) {
      if (o_.abandon && o_.abandon()) {
        stop = StopDecision::kAbandon;
      } else if ((o_.stop_after_step > 0 && step >= o_.stop_after_step) ||
                 (o_.preempt && o_.preempt())) {
        stop = StopDecision::kCheckpointAndStop;
      }
      const bool checkpoint_next =
          CheckpointDue(step, last) || stop == StopDecision::kCheckpointAndStop;
      if (stop != StopDecision::kAbandon && checkpoint_next && o_.confirm_checkpoint &&
          !o_.confirm_checkpoint()) {
        stop = StopDecision::kAbandon;
      }
    }
    std::string shared(1, static_cast<char>(stop));
    RETURN_IF_ERROR(comm_.Broadcast(&shared, 0));
    if (shared.size() != 1 || shared[0] < '0' || shared[0] > '2') {
      return absl::InternalError(absl::StrCat("job ", job_.id, " on ", comm_.Where(),
                                              ": a stop decision of ", shared.size(), " bytes"));
    }
    return static_cast<StopDecision>(shared[0]);
  }

  // At the interval, at the last step, and (a trunk) at each branch's start.
  bool CheckpointDue(int64_t step, bool last) const {
    return step % job_.checkpoint_interval == 0 || last ||
           std::find(job_.keep_steps.begin(), job_.keep_steps.end(), step) != job_.keep_steps.end();
  }

  // Writes the checkpoint of `step` on rank 0 and tells every rank how it went:
  // true, written (and recorded when the coordinator took it); false, the group
  // no longer holds the job (nothing of its is published: the group drops the
  // job and goes on); an error, the write failed while the job was still held.
  absl::StatusOr<bool> Checkpoint(int64_t step) {
    std::unique_ptr<torch::optim::AdamW> gathered;  // the whole optimizer on rank 0 (ZeRO-1)
    if (sharded_) {
      ASSIGN_OR_RETURN(gathered, zero_->Gather());
    }
    char outcome = 'k';  // k: kept, l: lost, e: failed
    absl::Status failed;
    if (comm_.rank() == 0) {
      CheckpointWrite write;
      write.token = o_.fencing_token;
      write.may_publish = o_.confirm_checkpoint;
      if (o_.fault_checkpoint_written) write.written = [&] { o_.fault_checkpoint_written(step); };
      const absl::Status saved = SaveCheckpoint(o_.run_dir, job_.id, step, model_,
                                                sharded_ ? *gathered : *optimizer_, write);
      if (absl::IsAborted(saved)) {
        outcome = 'l';
        std::cerr << comm_.Where() << ": job " << job_.id << ": " << saved.message() << "\n";
      } else if (!saved.ok()) {
        // A write that failed because another holder's cleanup removed this
        // group's files is a lost lease too, not a reason to end the group.
        const bool held = !o_.confirm_checkpoint || o_.confirm_checkpoint();
        outcome = held ? 'e' : 'l';
        failed = saved;
        std::cerr << comm_.Where() << ": job " << job_.id << ": " << saved.message()
                  << (held ? "" : " (the job is no longer this group's: dropping it)") << "\n";
      } else if (!o_.on_checkpoint || o_.on_checkpoint(step, CheckpointDir(o_.run_dir, step))) {
        // Pruning follows the coordinator's record: a group whose report was
        // refused (its lease moved) deletes nothing the new holder may need.
        recorded_step_ = step;
        PruneCheckpoints(o_.run_dir, /*keep=*/2, recorded_step_, job_.keep_steps, o_.fencing_token);
      }
    }
    std::string shared(1, outcome);
    RETURN_IF_ERROR(comm_.Broadcast(&shared, 0));
    if (shared == "k") return true;
    if (shared == "l") return false;
    if (comm_.rank() == 0) return failed;
    return absl::InternalError(absl::StrCat("job ", job_.id, " on ", comm_.Where(),
                                            ": rank 0 could not write the checkpoint of step ",
                                            step));
  }

  // The model's forward pass in the job's precision, with fp32 logits: under bf16
  // autocast the head computes in bf16, and every loss is taken in fp32 from here.
  DecoderOutput Forward(const torch::Tensor& inputs, Routing routing) {
    DecoderOutput out;
    {
      Autocast amp(device_, bf16_);
      out = model_->forward(inputs, routing);
    }
    out.logits = out.logits.to(torch::kFloat32);  // a no-op in fp32
    return out;
  }

  // One optimizer update over this rank's rows of the step, in micro-batches.
  absl::StatusOr<StepStats> TrainStep(int64_t step) {
    StepStats stats;
    try {
      model_->train();
      // Gradients set to none (not zeroed) so that they take no memory during the
      // first forward of a step, on LibTorch 1.13 as on 2.x (docs/memory.md).
      for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
      // Sums over this rank's micro-batches of the cross-entropy and the model's
      // named values, means weighted by their micro-batch's share of the global
      // batch. On the model's device, so that NCCL can reduce them with the gradients.
      StepTally tally(device_);
      const int64_t row0 = comm_.rank() * rows_per_rank_;
      for (int64_t r = 0; r < rows_per_rank_; r += micro_) {
        const int64_t rows = std::min(micro_, rows_per_rank_ - r);
        Batch batch =
            TrainBatch(data_, job_.seed, step, row0 + r, row0 + r + rows, job_.shape.context);
        const torch::Tensor inputs = batch.inputs.to(device_);
        const torch::Tensor targets = batch.targets.to(device_);
        DecoderOutput out = Forward(inputs, Routing::kTopK);
        const torch::Tensor ce = torch::nn::functional::cross_entropy(
            out.logits.reshape({-1, out.logits.size(-1)}), targets.reshape({-1}));
        out.logits = torch::Tensor();  // the loss keeps what it needs: [N, V] fewer in the backward
        const double share = double(rows) / double(job_.batch_size);
        ((ce + out.aux_loss) * share).backward();
        tally.Add(AuxValue{"train_loss", ce}, share);
        tally.Add(out.aux, share);
      }
      std::vector<torch::Tensor> grads;
      for (auto& p : model_->parameters()) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        grads.push_back(p.grad());
      }
      if (!sharded_) RETURN_IF_ERROR(comm_.AllReduceSum(grads));
      std::vector<torch::Tensor> sums = tally.tensors();
      RETURN_IF_ERROR(comm_.AllReduceSum(sums));
      stats.loss = tally.Scalar("train_loss");
      if (sharded_) {
        // Reduce onto owners, global norm, clip, owners' update, broadcast (zero.h).
        ASSIGN_OR_RETURN(stats.grad_norm, zero_->Step(job_.grad_clip, std::isfinite(stats.loss)));
      } else {
        stats.grad_norm =
            job_.grad_clip > 0
                ? torch::nn::utils::clip_grad_norm_(model_->parameters(), job_.grad_clip)
                : torch::nn::utils::clip_grad_norm_(model_->parameters(),
                                                    std::numeric_limits<double>::infinity());
        if (std::isfinite(stats.loss) && std::isfinite(stats.grad_norm)) AdamWStep(*optimizer_);
      }
      // After the update, from the step's sums over every rank (the same on each,
      // so the ranks stay identical): the model's step hooks (DECO's controller,
      // MoE's bias balancing) and what it reports.
      stats.model_metrics = model_->AfterStep(tally);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("job ", job_.id, " step ", step, " on ",
                                              comm_.Where(), ": ", e.what_without_backtrace()));
    }
    return stats;
  }

  // What one evaluation measured, summed over every rank's windows.
  struct Evaluation {
    double loss = 0.0;     // mean per-token cross-entropy
    double loss_se = 0.0;  // its standard error; meaningful when windows >= 2
    int64_t windows = 0;
    std::vector<double> capacity;  // per routed layer: the fraction of tokens it processed
    double capacity_mean = 0.0;    // their mean (for top-k exactly k / T)
  };

  // Evaluates the model on `step`'s windows (the final ones at the last step) in
  // both routing modes and appends the metrics: val_loss[_se] and, for routed
  // families, val_loss_causal[_se] and the realised capacities. Sets the result's
  // val_loss and val_loss_causal.
  absl::Status EvaluateInto(int64_t step, int64_t tokens, double flops,
                            std::vector<Metric>* metrics, TrainResult* result) {
    const std::vector<int64_t>& starts = step >= job_.steps ? final_starts_ : val_starts_;
    const auto add = [&](const char* name, double value) {
      metrics->push_back({name, step, value, tokens, flops});
    };
    ASSIGN_OR_RETURN(Evaluation top, Evaluate(Routing::kTopK, starts));
    result->val_loss = top.loss;
    add("val_loss", top.loss);
    if (top.windows >= 2) add("val_loss_se", top.loss_se);
    if (!model_->family().causal_eval) {
      // No routing, or token-choice experts that route each token alone: the
      // trained routing is causal.
      result->val_loss_causal = top.loss;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Evaluation causal, Evaluate(Routing::kThreshold, starts));
    result->val_loss_causal = causal.loss;
    add("val_loss_causal", causal.loss);
    if (causal.windows >= 2) add("val_loss_causal_se", causal.loss_se);
    if (routed_layers_ > 0) {
      add("val_capacity", top.capacity_mean);
      add("val_capacity_causal", causal.capacity_mean);
      add("val_capacity_causal_min",
          *std::min_element(causal.capacity.begin(), causal.capacity.end()));
      add("val_capacity_causal_max",
          *std::max_element(causal.capacity.begin(), causal.capacity.end()));
      // What the realised capacities would cost a kernel that runs only the chosen
      // tokens, against what the accounting (and so the FLOP axis of the laws)
      // charges at the nominal capacity. The threshold forward itself runs masked
      // full blocks, so this is a property of the router, not of this code.
      add("val_flops_ratio_causal",
          ForwardFlopsPerTokenAt(job_.shape, causal.capacity) / ForwardFlopsPerToken(job_.shape));
    }
    return absl::OkStatus();
  }

  // Mean cross-entropy over the validation windows `starts`, split over the ranks,
  // with its standard error and the routed layers' realised capacities.
  absl::StatusOr<Evaluation> Evaluate(Routing routing, const std::vector<int64_t>& starts) {
    namespace F = torch::nn::functional;
    // On the model's device (see TrainStep), float64: loss sum, token count, window
    // count, sum and sum of squares of the per-window mean losses, then tokens
    // processed by each routed layer. Sums, so the ranks' shares simply add.
    constexpr int64_t kFixed = 5;
    torch::Tensor sums =
        torch::zeros({kFixed + routed_layers_}, torch::dtype(torch::kFloat64).device(device_));
    try {
      torch::NoGradGuard no_grad;
      model_->eval();
      const int64_t n = static_cast<int64_t>(starts.size());
      const int64_t per_rank = (n + comm_.size() - 1) / comm_.size();
      const int64_t begin = std::min(n, comm_.rank() * per_rank);
      const int64_t end = std::min(n, begin + per_rank);
      for (int64_t i = begin; i < end; i += eval_rows_) {
        const int64_t stop = std::min(end, i + eval_rows_);
        Batch batch = ValBatch(data_, starts, i, stop, job_.shape.context);
        DecoderOutput out = Forward(batch.inputs.to(device_), routing);
        // log_softmax + nll_loss is what cross_entropy computes; done in two steps so
        // that the per-token losses come from the same log-probabilities as the sum.
        const torch::Tensor log_probs =
            torch::log_softmax(out.logits.reshape({-1, out.logits.size(-1)}), -1);
        const torch::Tensor targets = batch.targets.to(device_).reshape({-1});
        const torch::Tensor loss =
            F::nll_loss(log_probs, targets, F::NLLLossFuncOptions().reduction(torch::kSum));
        // Tokens of one window share their context and are strongly correlated;
        // windows (far apart, or consecutive but separate sequences) much less so.
        // So a window is the independent unit of the standard error, not a token.
        const torch::Tensor window_mean =
            F::nll_loss(log_probs, targets, F::NLLLossFuncOptions().reduction(torch::kNone))
                .view({stop - i, -1})
                .to(torch::kFloat64)
                .mean(1);
        sums[0] += loss.to(sums.options());
        sums[1] += static_cast<double>(batch.targets.numel());
        sums[2] += static_cast<double>(stop - i);
        sums[3] += window_mean.sum();
        sums[4] += window_mean.pow(2).sum();
        if (routed_layers_ > 0) sums.narrow(0, kFixed, routed_layers_) += out.routed_counts;
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("job ", job_.id, " evaluation on ", comm_.Where(),
                                              ": ", e.what_without_backtrace()));
    }
    std::vector<torch::Tensor> list{sums};
    RETURN_IF_ERROR(comm_.AllReduceSum(list));
    sums = sums.cpu();
    const double* v = sums.data_ptr<double>();
    Evaluation e;
    e.loss = v[0] / v[1];
    e.windows = static_cast<int64_t>(v[2]);
    if (e.windows >= 2) {
      const double w = v[2];
      const double variance = std::max(0.0, (v[4] - v[3] * v[3] / w) / (w - 1.0));
      e.loss_se = std::sqrt(variance / w);
    }
    double processed = 0.0;
    for (int64_t l = 0; l < routed_layers_; ++l) {
      e.capacity.push_back(v[kFixed + l] / v[1]);
      processed += v[kFixed + l];
    }
    // One division of exact integer counts, so top-k gives exactly k / T.
    if (routed_layers_ > 0) {
      e.capacity_mean = processed / (v[1] * static_cast<double>(routed_layers_));
    }
    return e;
  }

  void Report(const std::string& path, const std::vector<Metric>& metrics) {
    std::ofstream out(path, std::ios::app);
    for (const Metric& m : metrics) {
      out << nlohmann::json{{"step", m.step},
                            {"name", m.name},
                            {"value", m.value},
                            {"tokens", m.tokens},
                            {"flops", m.flops}}
                 .dump()
          << "\n";
    }
    if (o_.on_metrics) o_.on_metrics(metrics);
    if (o_.print_progress) {
      std::string line = fmt::format("step {}/{}", metrics[0].step, job_.steps);
      for (const Metric& m : metrics) line += fmt::format("  {} {:.4g}", m.name, m.value);
      std::cout << line << std::endl;
    }
  }

  const JobFile& job_;
  const TokenSource& data_;
  Communicator& comm_;
  const TrainerOptions& o_;
  torch::Device device_;
  // precision: bf16: forward passes under bf16 autocast (precision.h); weights,
  // gradients, optimizer state, the router and the losses stay fp32.
  bool bf16_;
  // optimizer_sharding: zero1 with two ranks or more: the moments are split
  // over the ranks (zero_); otherwise every rank holds them all (optimizer_).
  bool sharded_;
  Decoder model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<ShardedAdamW> zero_;
  int64_t recorded_step_ = -1;  // the newest checkpoint the coordinator recorded (rank 0)
  torch::optim::AdamW& Optimizer() { return sharded_ ? zero_->local() : *optimizer_; }
  int64_t rows_per_rank_ = 0;
  int64_t micro_ = 0;
  int64_t eval_rows_ = 0;              // windows per evaluation forward (EvalRows)
  std::vector<int64_t> val_starts_;    // interim evaluations (eval_tokens)
  std::vector<int64_t> final_starts_;  // the evaluation at the last step (final_eval_tokens)
  int64_t routed_layers_ = 0;
  const std::string metrics_path_ = o_.run_dir + "/metrics.jsonl";
  std::chrono::steady_clock::time_point last_report_;  // for tokens_per_s
  int64_t last_report_step_ = 0;
};

}  // namespace

absl::Status CheckWorkerCanRun(const JobFile& job) {
  if (job.precision != "fp32" && job.precision != "bf16") {
    return absl::UnimplementedError(absl::StrCat(
        "job ", job.id, ": precision '", job.precision,
        "' is not implemented by this worker (it trains fp32 and bf16); refusing the job "
        "rather than training it in another precision than it asks for"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Train(const JobFile& job, const TokenSource& data, Communicator& comm,
                                  const TrainerOptions& options) {
  RETURN_IF_ERROR(CheckWorkerCanRun(job));
  if (job.precision == "bf16") {
    if (const std::string why = Bf16Unsupported(options.device); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.id, ": precision 'bf16': ", why,
                       "; refusing the job rather than training it in fp32"));
    }
  }
  TuneHostAllocatorForTraining();
  return Run(job, data, comm, options).Go();
}

}  // namespace xmod
