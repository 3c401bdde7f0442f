// Everything rank 0 does for one leased job while every rank trains it: the
// heartbeat thread and its stall watchdog, the metric buffer, checkpoint
// ordering (metrics up to a checkpoint's step land before the checkpoint is
// recorded) and the attempt's end. Talks to the coordinator only through
// CoordinatorClient, so it is tested against a fake one.
//
// The job is "lost" once the coordinator answers FAILED_PRECONDITION or
// NOT_FOUND (the lease moved on) and "cancelled" once a heartbeat says CANCEL:
// from then on the session writes nothing. DRAIN (or the group's stop flag)
// asks training to checkpoint and stop.
#ifndef XMOD_WORKER_CLIENT_JOB_SESSION_H_
#define XMOD_WORKER_CLIENT_JOB_SESSION_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/client/coordinator_client.h"
#include "worker/train/train_result.h"

namespace xmod {

struct JobSessionOptions {
  int64_t metrics_batch = 256;              // points per ReportMetrics call
  double flush_seconds = 2.0;               // a partial batch goes out after this long
  double stall_seconds = 1800;              // no step for this long: the watchdog fires (0: never)
  const std::atomic<bool>* stop = nullptr;  // the group's stop request (may be null)
  // What the watchdog does after reporting the attempt failed. The training thread
  // is stuck (most likely in a collective with a rank that stopped), so nothing
  // can be unwound: by default the process ends (exit code 3) and mpirun takes the
  // other ranks down. Tests record the call instead.
  std::function<void()> on_stalled;
};

class JobSession {
 public:
  // `resume_step`: the checkpoint step the attempt starts from; the session's
  // step begins there, since the coordinator refuses steps that go back.
  JobSession(CoordinatorClient& client, JobSessionOptions options, std::string worker_id,
             std::string job_id, int64_t fencing_token, int64_t resume_step = 0);
  ~JobSession();
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;

  // Beats every TTL/3 (and at least four times per stall timeout) until
  // StopHeartbeat or destruction. The watchdog counts time spent in a report to
  // the coordinator (retried through an outage) as progress.
  void StartHeartbeat(double ttl_seconds);
  void StopHeartbeat();

  // Checkpoint and stop: told to drain, the group is being stopped, or the
  // coordinator has been silent past the client's bound (CoordinatorClient::GaveUp).
  bool ShouldStop() const;
  // Stop without writing anything: the job is no longer this group's.
  bool ShouldAbandon() const { return lost_ || cancelled_; }
  bool lost() const { return lost_; }
  bool cancelled() const { return cancelled_; }
  // One heartbeat now: whether the job is still this group's. An unreachable
  // coordinator counts as yes (a checkpoint is then only recorded if the lease
  // still holds when the group reports it).
  bool ConfirmLease();

  void OnStep(int64_t step);
  void OnMetrics(const std::vector<Metric>& metrics);
  // Flushes the buffer first; the checkpoint is recorded only if that landed.
  // Whether it was recorded.
  bool OnCheckpoint(int64_t step, const std::string& path);
  // Sends the buffer; false when it did not land (it is kept and sent again later).
  bool Flush();

  // Ends the attempt as training ended: CompleteJob, or FailJob with the reason
  // (an error is retryable). A succeeded run whose metrics did not all land ends
  // as a retryable failure, so a succeeded job has no hole in its curve.
  void Finish(const absl::StatusOr<TrainResult>& result);
  // Ends the attempt as a failure no retry can fix (a malformed job file).
  void Refuse(const absl::Status& why);

 private:
  void Beat();
  void Stalled();
  v1::FailJobRequest Failure(v1::FailJobRequest::Reason reason, bool retryable,
                             const std::string& message, int64_t step) const;
  void Send(const v1::FailJobRequest& fail);
  // Marks the job lost on FAILED_PRECONDITION / NOT_FOUND; false on any error.
  bool Check(const grpc::Status& s);
  bool FlushLocked();

  // Counts a report in flight (they retry while the coordinator is away).
  struct Reporting {
    explicit Reporting(std::atomic<int>& n) : n(n) { ++n; }
    ~Reporting() { --n; }
    std::atomic<int>& n;
  };

  CoordinatorClient& client_;
  JobSessionOptions o_;
  std::atomic<int> reporting_{0};
  // How long one heartbeat waits for an unreachable coordinator: the beat period.
  std::atomic<double> beat_wait_{10.0};
  std::string worker_id_;
  std::string job_id_;
  int64_t token_;
  std::atomic<int64_t> step_{0};
  std::atomic<double> last_progress_{0.0};  // steady-clock seconds of the last step
  std::atomic<bool> lost_{false}, cancelled_{false}, drain_{false}, ended_{false};
  std::thread heartbeat_;
  std::mutex beat_mu_;  // one heartbeat at a time, so their steps never go back
  std::mutex mu_;
  std::condition_variable cv_;
  bool heartbeat_stop_ = false;  // guarded by mu_
  std::mutex buffer_mu_;
  v1::ReportMetricsRequest pending_;  // guarded by buffer_mu_
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

// FailJob's message is bounded by the coordinator (64 KiB, request_bounds.h); a
// longer error text is cut to 16 KiB, keeping its start, rather than losing the
// report.
std::string BoundedMessage(const std::string& message);

}  // namespace xmod

#endif  // XMOD_WORKER_CLIENT_JOB_SESSION_H_
