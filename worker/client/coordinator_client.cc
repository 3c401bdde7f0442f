#include "worker/client/coordinator_client.h"

#include <chrono>
#include <iostream>
#include <thread>

#include "proto/channel.h"

namespace xmod {

namespace pb = ::xmod::v1;

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

GrpcCoordinatorClient::GrpcCoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                             std::string token, std::string where,
                                             const std::atomic<bool>* stop)
    : stub_(pb::Coordinator::NewStub(channel)),
      token_(std::move(token)),
      where_(std::move(where)),
      stop_(stop) {}

template <typename Request, typename Response>
grpc::Status GrpcCoordinatorClient::Call(
    const char* name,
    grpc::Status (pb::Coordinator::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, Response* response, bool give_up_on_stop) {
  double backoff = 0.2;
  for (int attempt = 1;; ++attempt) {
    auto context = MakeContext(token_, 30.0);
    grpc::Status s = ((*stub_).*rpc)(context.get(), request, response);
    if (!Retryable(s)) return s;
    if (give_up_on_stop && stop_ != nullptr && stop_->load()) return s;
    if (attempt == 1 || attempt % 10 == 0) {
      std::cerr << where_ << ": " << name << ": coordinator unreachable (" << s.error_message()
                << "); retrying\n";
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(5.0, backoff * 1.6);
  }
}

grpc::Status GrpcCoordinatorClient::Register(const pb::RegisterWorkerRequest& request,
                                             pb::RegisterWorkerResponse* response) {
  return Call("RegisterWorker", &pb::Coordinator::Stub::RegisterWorker, request, response, true);
}

grpc::Status GrpcCoordinatorClient::Lease(const pb::LeaseJobRequest& request,
                                          pb::LeaseJobResponse* response) {
  return Call("LeaseJob", &pb::Coordinator::Stub::LeaseJob, request, response, true);
}

grpc::Status GrpcCoordinatorClient::Heartbeat(const pb::HeartbeatRequest& request,
                                              pb::HeartbeatResponse* response) {
  auto context = MakeContext(token_, 10.0);
  return stub_->Heartbeat(context.get(), request, response);
}

grpc::Status GrpcCoordinatorClient::ReportMetrics(const pb::ReportMetricsRequest& request) {
  pb::ReportMetricsResponse none;
  return Call("ReportMetrics", &pb::Coordinator::Stub::ReportMetrics, request, &none, false);
}

grpc::Status GrpcCoordinatorClient::ReportCheckpoint(const pb::ReportCheckpointRequest& request) {
  pb::ReportCheckpointResponse none;
  return Call("ReportCheckpoint", &pb::Coordinator::Stub::ReportCheckpoint, request, &none, false);
}

grpc::Status GrpcCoordinatorClient::CompleteJob(const pb::CompleteJobRequest& request) {
  pb::CompleteJobResponse none;
  return Call("CompleteJob", &pb::Coordinator::Stub::CompleteJob, request, &none, false);
}

grpc::Status GrpcCoordinatorClient::FailJob(const pb::FailJobRequest& request) {
  pb::FailJobResponse none;
  return Call("FailJob", &pb::Coordinator::Stub::FailJob, request, &none, false);
}

grpc::Status GrpcCoordinatorClient::FailJobOnce(const pb::FailJobRequest& request) {
  pb::FailJobResponse none;
  auto context = MakeContext(token_, 10.0);
  return stub_->FailJob(context.get(), request, &none);
}

}  // namespace xmod
