#include "worker/client/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include "common/status_macros.h"
#include "proto/channel.h"

namespace xmod {

namespace pb = ::xmod::v1;

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

GrpcCoordinatorClient::GrpcCoordinatorClient(ChannelOptions channel, std::string where,
                                             const std::atomic<bool>* stop)
    : channel_options_(std::move(channel)), where_(std::move(where)), stop_(stop) {}

absl::StatusOr<std::unique_ptr<GrpcCoordinatorClient>> GrpcCoordinatorClient::Create(
    ChannelOptions channel, std::string where, const std::atomic<bool>* stop) {
  channel.reconnect_max_seconds = kReconnectSeconds;
  std::unique_ptr<GrpcCoordinatorClient> client(
      new GrpcCoordinatorClient(std::move(channel), std::move(where), stop));
  RETURN_IF_ERROR(client->Connect());
  return client;
}

absl::Status GrpcCoordinatorClient::Connect() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(channel_options_));
  stub_ = pb::Coordinator::NewStub(channel);
  return absl::OkStatus();
}

absl::Status GrpcCoordinatorClient::UseLeaseTtl(double ttl_seconds) {
  if (!(ttl_seconds > 0)) return absl::OkStatus();  // an old coordinator: keep the default
  const double bound = std::clamp(ttl_seconds / 6.0, 0.05, kReconnectSeconds);
  if (bound >= channel_options_.reconnect_max_seconds) return absl::OkStatus();
  channel_options_.reconnect_max_seconds = bound;
  return Connect();  // channel arguments are fixed when a channel is made
}

template <typename Request, typename Response>
grpc::Status GrpcCoordinatorClient::Call(
    const char* name,
    grpc::Status (pb::Coordinator::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, Response* response, bool give_up_on_stop) {
  // The group's own calls try in short slices so that a stop request is seen
  // while the coordinator is away; a job's reports wait longer per try.
  const double per_try = give_up_on_stop ? 5.0 : 30.0;
  double backoff = 0.05;
  for (int attempt = 1;; ++attempt) {
    auto context = MakeContext(channel_options_.token, per_try, /*wait_for_ready=*/true);
    grpc::Status s = ((*stub_).*rpc)(context.get(), request, response);
    if (!Retryable(s)) return s;
    if (give_up_on_stop && stop_ != nullptr && stop_->load()) return s;
    if (attempt == 1 || attempt % 10 == 0) {
      std::cerr << where_ << ": " << name << ": coordinator unreachable (" << s.error_message()
                << "); retrying\n";
    }
    // A try that waited out its deadline has waited already; one that failed fast
    // (the coordinator shutting down, overloaded) sleeps a little, never longer
    // than the reconnection bound.
    if (s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(channel_options_.reconnect_max_seconds, backoff * 2);
    }
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
                                              pb::HeartbeatResponse* response,
                                              double wait_seconds) {
  auto context = MakeContext(channel_options_.token, wait_seconds, /*wait_for_ready=*/true);
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
  auto context = MakeContext(channel_options_.token, 10.0);
  return stub_->FailJob(context.get(), request, &none);
}

}  // namespace xmod
