// Rank 0's calls to the coordinator, behind an interface so that the job session
// (job_session.h) is unit-tested against a fake coordinator that fails, delays,
// cancels or drains on demand. GrpcCoordinatorClient is the real one.
#ifndef XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_
#define XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "proto/channel.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {

// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: worth trying again.
bool Retryable(const grpc::Status& status);

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  // One try, waiting up to `wait_seconds` for the coordinator to be reachable: a
  // lost heartbeat is retried at the next beat.
  virtual grpc::Status Heartbeat(const v1::HeartbeatRequest& request,
                                 v1::HeartbeatResponse* response, double wait_seconds) = 0;
  // These retry while the coordinator is unreachable (an implementation's choice);
  // what they return is final.
  virtual grpc::Status ReportMetrics(const v1::ReportMetricsRequest& request) = 0;
  virtual grpc::Status ReportCheckpoint(const v1::ReportCheckpointRequest& request) = 0;
  virtual grpc::Status CompleteJob(const v1::CompleteJobRequest& request) = 0;
  virtual grpc::Status FailJob(const v1::FailJobRequest& request) = 0;
  // One try: the watchdog's last word before the process ends.
  virtual grpc::Status FailJobOnce(const v1::FailJobRequest& request) = 0;
  // True once the coordinator has not answered for longer than the client's bound
  // (GrpcCoordinatorClient's `give_up_seconds`): the group checkpoints and exits,
  // freeing its allocation, rather than waiting without end.
  virtual bool GaveUp() const { return false; }
};

// How a group finds its coordinator and how long it waits for one.
struct ReachOptions {
  // A file holding "host:port" (what `xmod serve --address-file` writes). While
  // the coordinator is unreachable the client reads it again (at most once per
  // second) and follows a changed address; a missing file keeps the old one.
  std::string address_file;
  // No answer from the coordinator for this long: every call returns UNAVAILABLE
  // at once and GaveUp() is true (0: wait forever).
  double give_up_seconds = 0;
  // Once the group's stop flag is set, a job's report retries at most this long,
  // so a group signalled during an outage still ends within Slurm's grace.
  double stop_grace_seconds = 15;
};

// The first line of an address file, trimmed: NOT_FOUND / INVALID_ARGUMENT.
absl::StatusOr<std::string> ReadAddressFile(const std::string& path);

// Over a gRPC channel, with the bearer token on every call. Every call waits for
// the channel to be ready rather than failing at once while the coordinator is
// away, and the channel tries to reconnect at least every `reconnect_seconds()`,
// so that the group is back within the grace a restarted coordinator grants (one
// lease TTL). A retried call that failed fast sleeps at most that long between
// tries. `stop` (may be null) set makes the group's own calls (register, lease)
// give up, not the job's reports (those give up `stop_grace_seconds` after it).
class GrpcCoordinatorClient : public CoordinatorClient {
 public:
  // Before the lease TTL is known: reconnect at least every second.
  static constexpr double kReconnectSeconds = 1.0;

  static absl::StatusOr<std::unique_ptr<GrpcCoordinatorClient>> Create(
      ChannelOptions channel, std::string where, const std::atomic<bool>* stop,
      ReachOptions reach = {});

  // The coordinator's lease TTL (from RegisterWorker): reconnection is bounded by
  // half a heartbeat interval (TTL/6, at most kReconnectSeconds), so a group
  // reconnects and beats well within one TTL of the coordinator's return.
  absl::Status UseLeaseTtl(double ttl_seconds);
  double reconnect_seconds() const;
  // The address calls go to now (it changes when the address file does).
  std::string address() const;
  bool GaveUp() const override;
  // Seconds since the coordinator last answered any call.
  double SilentSeconds() const;

  grpc::Status Register(const v1::RegisterWorkerRequest& request,
                        v1::RegisterWorkerResponse* response);
  grpc::Status Lease(const v1::LeaseJobRequest& request, v1::LeaseJobResponse* response);

  grpc::Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response,
                         double wait_seconds) override;
  grpc::Status ReportMetrics(const v1::ReportMetricsRequest& request) override;
  grpc::Status ReportCheckpoint(const v1::ReportCheckpointRequest& request) override;
  grpc::Status CompleteJob(const v1::CompleteJobRequest& request) override;
  grpc::Status FailJob(const v1::FailJobRequest& request) override;
  grpc::Status FailJobOnce(const v1::FailJobRequest& request) override;

 private:
  template <typename Request, typename Response>
  grpc::Status Call(const char* name,
                    grpc::Status (v1::Coordinator::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                               Response*),
                    const Request& request, Response* response, bool give_up_on_stop);

  GrpcCoordinatorClient(ChannelOptions channel, std::string where, const std::atomic<bool>* stop,
                        ReachOptions reach);
  absl::Status Connect(const ChannelOptions& options);  // replaces the stub
  std::shared_ptr<v1::Coordinator::Stub> Stub() const;
  // Records that the coordinator answered (any status but a retryable one).
  void Heard(const grpc::Status& s);
  // Seconds left of the stop grace (ReachOptions::stop_grace_seconds), counted
  // over all calls from the first that saw the stop flag; infinite before it.
  double StopGraceLeft();
  // After a failed try: follows a changed address file (rate-limited).
  void FollowAddressFile();

  const std::string where_;
  const std::atomic<bool>* stop_;
  const ReachOptions reach_;
  const std::string token_;
  // The heartbeat thread and the training thread call at once; a reconnection
  // swaps the stub under mu_, and a call keeps the stub it started with.
  mutable std::mutex mu_;
  ChannelOptions channel_options_;               // guarded by mu_
  std::shared_ptr<v1::Coordinator::Stub> stub_;  // guarded by mu_
  double last_file_check_ = 0;                   // guarded by mu_
  std::atomic<double> last_answer_;              // steady-clock seconds
  std::atomic<double> stop_seen_{-1};            // when a call first saw the stop flag
};

}  // namespace xmod

#endif  // XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_
