#include "worker/client/worker_group.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/id.h"
#include "common/status_macros.h"
#include "proto/channel.h"
#include "worker/train/trainer.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {

namespace pb = ::xmod::v1;

namespace {

// FailJob's message is bounded by the coordinator (64 KiB, request_bounds.h); a
// longer error text is cut, keeping its start, rather than losing the report.
std::string Bounded(const std::string& message) {
  constexpr size_t kMax = 16 << 10;
  return message.size() <= kMax ? message : message.substr(0, kMax) + " [cut]";
}

std::atomic<bool> g_stop_requested{false};

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// Rank 0's connection to the coordinator, with retries on transient failures.
class Client {
 public:
  Client(const WorkerGroupOptions& o, std::shared_ptr<grpc::Channel> channel, std::string where)
      : o_(o), stub_(pb::Coordinator::NewStub(channel)), where_(std::move(where)) {}

  // Calls `rpc` until it succeeds, fails for good, or a stop is requested
  // (give_up_on_stop). Backoff from 0.2 s to 5 s between attempts.
  template <typename Request, typename Response>
  grpc::Status Call(const char* name,
                    grpc::Status (pb::Coordinator::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                               Response*),
                    const Request& request, Response* response, bool give_up_on_stop = true) {
    double backoff = 0.2;
    for (int attempt = 1;; ++attempt) {
      auto context = MakeContext(o_.token, 30.0);
      grpc::Status s = ((*stub_).*rpc)(context.get(), request, response);
      if (!Retryable(s)) return s;
      if (give_up_on_stop && g_stop_requested) return s;
      if (attempt == 1 || attempt % 10 == 0) {
        std::cerr << where_ << ": " << name << ": coordinator unreachable (" << s.error_message()
                  << "); retrying\n";
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(5.0, backoff * 1.6);
    }
  }

  pb::Coordinator::Stub& stub() { return *stub_; }

 private:
  const WorkerGroupOptions& o_;
  std::unique_ptr<pb::Coordinator::Stub> stub_;
  std::string where_;
};

// Everything rank 0 does for one leased job while all ranks train it.
class JobSession {
 public:
  JobSession(Client& client, const WorkerGroupOptions& o, std::string worker_id,
             const pb::LeaseJobResponse& lease)
      : client_(client), o_(o), worker_id_(std::move(worker_id)), lease_(lease) {}

  ~JobSession() { StopHeartbeat(); }

  void StartHeartbeat(double ttl) {
    last_progress_ = Now();
    // Beats every TTL/3; the watchdog also looks at least four times per stall timeout.
    double period = ttl / 3.0;
    if (o_.stall_seconds > 0) period = std::min(period, o_.stall_seconds / 4.0);
    period = std::max(0.05, period);
    heartbeat_ = std::thread([this, period] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!heartbeat_stop_) {
        cv_.wait_for(lock, std::chrono::duration<double>(period));
        if (heartbeat_stop_) break;
        lock.unlock();
        if (o_.stall_seconds > 0 && Now() - last_progress_ > o_.stall_seconds) Stalled();
        Beat();
        lock.lock();
      }
    });
  }

  void StopHeartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      heartbeat_stop_ = true;
    }
    cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  // Checkpoint and stop: told to drain, or the group is being stopped.
  bool ShouldStop() const { return drain_ || g_stop_requested; }
  // Stop without writing anything: the job is no longer this group's.
  bool ShouldAbandon() const { return lost_ || cancelled_; }
  bool lost() const { return lost_; }
  // One heartbeat now: whether the job is still this group's. An unreachable
  // coordinator counts as yes (the checkpoint is then only recorded if the lease
  // still holds when the group reports it).
  bool ConfirmLease() {
    Beat();
    return !ShouldAbandon();
  }
  bool cancelled() const { return cancelled_; }

  void OnStep(int64_t step) {
    step_ = step;
    last_progress_ = Now();
  }

  void OnMetrics(const std::vector<Metric>& metrics) {
    std::lock_guard<std::mutex> lock(buffer_mu_);
    for (const Metric& m : metrics) {
      pb::Metric* p = pending_.add_metrics();
      p->set_name(m.name);
      p->set_step(m.step);
      p->set_value(m.value);
      p->set_tokens(m.tokens);
      p->set_flops(m.flops);
    }
    const auto now = std::chrono::steady_clock::now();
    if (pending_.metrics_size() >= o_.metrics_batch ||
        now - last_flush_ > std::chrono::seconds(2)) {
      FlushLocked();
    }
  }

  // Metrics up to the checkpoint's step are committed before the checkpoint is
  // recorded, so a resume from it never misses a row.
  void OnCheckpoint(int64_t step, const std::string& path) {
    std::lock_guard<std::mutex> lock(buffer_mu_);
    if (!FlushLocked()) return;
    pb::ReportCheckpointRequest r;
    r.set_job_id(lease_.job_id());
    r.set_fencing_token(lease_.fencing_token());
    r.set_step(step);
    r.set_path(path);
    std::ifstream meta(path + "/meta.json");
    std::stringstream text;
    text << meta.rdbuf();
    r.set_checksum(HexId(text.str()));
    pb::ReportCheckpointResponse none;
    Check(client_.Call("ReportCheckpoint", &pb::Coordinator::Stub::ReportCheckpoint, r, &none,
                       false));
  }

  bool Flush() {
    std::lock_guard<std::mutex> lock(buffer_mu_);
    return FlushLocked();
  }

  void Finish(const absl::StatusOr<TrainResult>& result) {
    if (lost_ || cancelled_) return;  // the job is no longer ours: write nothing
    const bool flushed = Flush();
    if (lost_) return;
    pb::FailJobRequest fail;
    if (!flushed) {
      // Rows that never landed are regenerated by the next attempt from the last
      // recorded checkpoint; completing now would leave a hole in the curve.
      fail = RetryableFailure("metrics could not be delivered");
    } else if (!result.ok()) {
      fail = RetryableFailure(std::string(result.status().message()));
    } else if (result->outcome == TrainOutcome::kSucceeded) {
      pb::CompleteJobRequest done;
      done.set_job_id(lease_.job_id());
      done.set_fencing_token(lease_.fencing_token());
      done.set_step(result->step);
      pb::CompleteJobResponse none;
      Check(client_.Call("CompleteJob", &pb::Coordinator::Stub::CompleteJob, done, &none, false));
      return;
    } else {
      fail.set_job_id(lease_.job_id());
      fail.set_fencing_token(lease_.fencing_token());
      fail.set_reason(result->outcome == TrainOutcome::kDiverged ? pb::FailJobRequest::DIVERGED
                                                                 : pb::FailJobRequest::PREEMPTED);
      fail.set_message(Bounded(result->message));
      fail.set_step(result->step);
    }
    pb::FailJobResponse none;
    Check(client_.Call("FailJob", &pb::Coordinator::Stub::FailJob, fail, &none, false));
  }

 private:
  void Beat() {
    pb::HeartbeatRequest r;
    r.set_worker_id(worker_id_);
    r.set_job_id(lease_.job_id());
    r.set_fencing_token(lease_.fencing_token());
    r.set_step(step_);
    pb::HeartbeatResponse resp;
    auto context = MakeContext(o_.token, 10.0);
    grpc::Status s = client_.stub().Heartbeat(context.get(), r, &resp);
    if (Retryable(s)) return;  // try again at the next beat; the lease may still hold
    if (!Check(s)) return;
    if (resp.action() == pb::HeartbeatResponse::CANCEL) cancelled_ = true;
    if (resp.action() == pb::HeartbeatResponse::DRAIN) drain_ = true;
  }

  // A retryable error of this attempt at the last completed step.
  pb::FailJobRequest RetryableFailure(const std::string& message) const {
    pb::FailJobRequest fail;
    fail.set_job_id(lease_.job_id());
    fail.set_fencing_token(lease_.fencing_token());
    fail.set_reason(pb::FailJobRequest::ERROR);
    fail.set_retryable(true);
    fail.set_message(Bounded(message));
    fail.set_step(step_);
    return fail;
  }

  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The watchdog fired: training made no step for stall_seconds. The training
  // thread is stuck (most likely in a collective with a rank that stopped), so
  // nothing can be unwound: report the attempt failed, so the job is leased again
  // without waiting for the lease to run out, and end the process. mpirun then
  // ends the other ranks.
  [[noreturn]] void Stalled() {
    std::cerr << "job " << lease_.job_id() << ": no training step for " << o_.stall_seconds
              << " s (last step " << step_ << "); reporting the attempt failed and ending the group"
              << std::endl;
    if (!lost_ && !cancelled_) {
      const pb::FailJobRequest fail =
          RetryableFailure(absl::StrCat("stalled: no training step for ", o_.stall_seconds, " s"));
      pb::FailJobResponse none;
      auto context = MakeContext(o_.token, 10.0);
      const grpc::Status s = client_.stub().FailJob(context.get(), fail, &none);
      if (!s.ok()) std::cerr << "job " << lease_.job_id() << ": " << s.error_message() << std::endl;
    }
    std::_Exit(3);
  }

  // Marks the job lost on FAILED_PRECONDITION / NOT_FOUND; false on any error.
  bool Check(const grpc::Status& s) {
    if (s.ok()) return true;
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        s.error_code() == grpc::StatusCode::NOT_FOUND) {
      if (!lost_.exchange(true)) {
        std::cerr << "job " << lease_.job_id() << ": no longer held by this group ("
                  << s.error_message() << "); dropping it\n";
      }
    } else {
      std::cerr << "job " << lease_.job_id() << ": " << s.error_message() << "\n";
    }
    return false;
  }

  bool FlushLocked() {
    last_flush_ = std::chrono::steady_clock::now();
    if (lost_ || cancelled_) {
      pending_.clear_metrics();
      return false;
    }
    if (pending_.metrics_size() == 0) return true;
    pending_.set_job_id(lease_.job_id());
    pending_.set_fencing_token(lease_.fencing_token());
    pb::ReportMetricsResponse none;
    grpc::Status s = client_.Call("ReportMetrics", &pb::Coordinator::Stub::ReportMetrics, pending_,
                                  &none, false);
    // Kept on failure: a later flush sends it again (a resend is idempotent), and
    // no checkpoint is recorded past rows that have not landed.
    if (s.ok()) pending_.clear_metrics();
    return Check(s);
  }

  Client& client_;
  const WorkerGroupOptions& o_;
  std::string worker_id_;
  pb::LeaseJobResponse lease_;
  std::atomic<int64_t> step_{0};
  std::atomic<double> last_progress_{0.0};  // steady-clock seconds of the last step
  std::atomic<bool> lost_{false}, cancelled_{false}, drain_{false};
  std::thread heartbeat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool heartbeat_stop_ = false;  // guarded by mu_
  std::mutex buffer_mu_;
  pb::ReportMetricsRequest pending_;  // guarded by buffer_mu_
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

std::string HostName() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// Rank 0: decides what the group does next and tells the other ranks.
absl::Status Lead(const WorkerGroupOptions& o, Communicator& comm) {
  ChannelOptions channel_options{o.coordinator, o.token, o.tls_ca};
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(channel_options));
  Client client(o, channel, comm.Where());
  pb::RegisterWorkerRequest reg;
  reg.set_host(HostName());
  reg.set_ranks(comm.size());
  reg.set_name(o.name);
  pb::RegisterWorkerResponse registered;
  grpc::Status s =
      client.Call("RegisterWorker", &pb::Coordinator::Stub::RegisterWorker, reg, &registered);
  auto broadcast_exit = [&] {
    std::string cmd = R"({"cmd":"exit"})";
    return comm.Broadcast(&cmd, 0);
  };
  if (!s.ok()) {
    RETURN_IF_ERROR(broadcast_exit());
    if (g_stop_requested) return absl::OkStatus();
    return FromGrpc(s, "RegisterWorker");
  }
  const std::string worker_id = registered.worker_id();
  std::cerr << comm.Where() << ": worker group " << worker_id << " (" << comm.size()
            << " ranks) registered with " << o.coordinator << "\n";

  while (!g_stop_requested) {
    pb::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    pb::LeaseJobResponse lease;
    s = client.Call("LeaseJob", &pb::Coordinator::Stub::LeaseJob, req, &lease);
    if (!s.ok()) {
      if (g_stop_requested) break;
      RETURN_IF_ERROR(broadcast_exit());
      return FromGrpc(s, "LeaseJob");
    }
    if (!lease.has_job()) {
      if (lease.idle() == pb::LeaseJobResponse::IDLE_DONE || o.exit_when_idle) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
      continue;
    }
    JobSession session(client, o, worker_id, lease);
    auto job = ParseTrainJob(nlohmann::json::parse(lease.job_json()));
    absl::StatusOr<std::unique_ptr<TokenSource>> data =
        job.ok() ? OpenJobData(*job) : absl::StatusOr<std::unique_ptr<TokenSource>>(job.status());
    if (!data.ok()) {
      // Nothing was broadcast: the other ranks still wait for a command.
      session.Finish(
          absl::InternalError(absl::StrCat(comm.Where(), ": ", data.status().message())));
      continue;
    }
    nlohmann::json cmd = {
        {"cmd", "train"}, {"job", lease.job_json()}, {"resume_step", lease.resume_step()}};
    std::string bytes = cmd.dump();
    RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
    session.StartHeartbeat(lease.lease_ttl_seconds());
    TrainerOptions t;
    t.run_dir = o.run_dir + "/" + job->id;
    t.resume = true;
    t.resume_step = lease.resume_step();
    t.threads = o.threads;
    t.device = o.device;
    t.preempt = [&] { return session.ShouldStop(); };
    t.abandon = [&] { return session.ShouldAbandon(); };
    t.confirm_checkpoint = [&] { return session.ConfirmLease(); };
    t.on_metrics = [&](const std::vector<Metric>& m) { session.OnMetrics(m); };
    t.on_checkpoint = [&](int64_t step, const std::string& path) {
      session.OnCheckpoint(step, path);
    };
    t.on_step = [&](int64_t step) { session.OnStep(step); };
    std::cerr << comm.Where() << ": job " << job->id << " attempt " << lease.attempt()
              << (lease.resume_step() > 0 ? absl::StrCat(" from step ", lease.resume_step()) : "")
              << "\n";
    absl::StatusOr<TrainResult> result = Train(*job, **data, comm, t);
    session.StopHeartbeat();
    session.Finish(result);
    if (!result.ok()) {
      // The other ranks may be waiting in a collective this rank left: end the
      // world (the failure is recorded; the job is retried elsewhere).
      std::cerr << comm.Where() << ": " << result.status().message() << "; ending the group\n";
      comm.Abort(1);
    }
  }
  return broadcast_exit();
}

// Ranks other than 0: train whatever rank 0 broadcasts, until told to exit.
absl::Status Follow(const WorkerGroupOptions& o, Communicator& comm) {
  while (true) {
    std::string bytes;
    RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
    const nlohmann::json cmd = nlohmann::json::parse(bytes);
    if (cmd["cmd"] == "exit") return absl::OkStatus();
    ASSIGN_OR_RETURN(TrainJob job,
                     ParseTrainJob(nlohmann::json::parse(cmd["job"].get<std::string>())));
    // Rank 0 opened the same data before broadcasting; failing here (e.g. a path
    // missing on this node) ends the group, and the job's lease runs out.
    auto data = OpenJobData(job);
    if (!data.ok()) {
      std::cerr << comm.Where() << ": " << data.status().message() << "; ending the group\n";
      comm.Abort(1);
    }
    TrainerOptions t;
    t.run_dir = o.run_dir + "/" + job.id;
    t.resume = true;
    t.resume_step = cmd["resume_step"].get<int64_t>();
    t.threads = o.threads;
    t.device = o.device;
    auto result = Train(job, **data, comm, t);
    if (!result.ok()) {
      // Rank 0 may be waiting in a collective: end the world; its lease expires
      // and the job is retried on another group.
      std::cerr << comm.Where() << ": " << result.status().message() << "; ending the group\n";
      comm.Abort(1);
    }
  }
}

}  // namespace

void RequestStop() { g_stop_requested = true; }

absl::Status RunWorkerGroup(const WorkerGroupOptions& options, Communicator& comm) {
  return comm.rank() == 0 ? Lead(options, comm) : Follow(options, comm);
}

}  // namespace xmod
