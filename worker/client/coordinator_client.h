// Rank 0's calls to the coordinator, behind an interface so that the job session
// (job_session.h) is unit-tested against a fake coordinator that fails, delays,
// cancels or drains on demand. GrpcCoordinatorClient is the real one.
#ifndef XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_
#define XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {

// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: worth trying again.
bool Retryable(const grpc::Status& status);

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  // One try with a short deadline: a lost heartbeat is retried at the next beat.
  virtual grpc::Status Heartbeat(const v1::HeartbeatRequest& request,
                                 v1::HeartbeatResponse* response) = 0;
  // These retry while the coordinator is unreachable (an implementation's choice);
  // what they return is final.
  virtual grpc::Status ReportMetrics(const v1::ReportMetricsRequest& request) = 0;
  virtual grpc::Status ReportCheckpoint(const v1::ReportCheckpointRequest& request) = 0;
  virtual grpc::Status CompleteJob(const v1::CompleteJobRequest& request) = 0;
  virtual grpc::Status FailJob(const v1::FailJobRequest& request) = 0;
  // One try: the watchdog's last word before the process ends.
  virtual grpc::Status FailJobOnce(const v1::FailJobRequest& request) = 0;
};

// Over a gRPC channel, with the bearer token on every call. Retried calls back
// off from 0.2 s to 5 s; `stop` (may be null) set makes the group's own calls
// (register, lease) give up, not the job's reports.
class GrpcCoordinatorClient : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(std::shared_ptr<grpc::Channel> channel, std::string token,
                        std::string where, const std::atomic<bool>* stop);

  grpc::Status Register(const v1::RegisterWorkerRequest& request,
                        v1::RegisterWorkerResponse* response);
  grpc::Status Lease(const v1::LeaseJobRequest& request, v1::LeaseJobResponse* response);

  grpc::Status Heartbeat(const v1::HeartbeatRequest& request,
                         v1::HeartbeatResponse* response) override;
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

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::string token_;
  std::string where_;
  const std::atomic<bool>* stop_;
};

}  // namespace xmod

#endif  // XMOD_WORKER_CLIENT_COORDINATOR_CLIENT_H_
