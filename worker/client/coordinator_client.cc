#include "worker/client/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "proto/channel.h"

namespace xmod {

namespace pb = ::xmod::v1;

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

absl::StatusOr<std::string> ReadAddressFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the address file ", path));
  std::string line;
  std::getline(in, line);
  line = std::string(absl::StripAsciiWhitespace(line));
  if (line.empty())
    return absl::InvalidArgumentError(absl::StrCat("address file ", path, " is empty"));
  return line;
}

GrpcCoordinatorClient::GrpcCoordinatorClient(ChannelOptions channel, std::string where,
                                             const std::atomic<bool>* stop, ReachOptions reach)
    : where_(std::move(where)),
      stop_(stop),
      reach_(std::move(reach)),
      token_(channel.token),
      channel_options_(std::move(channel)),
      last_answer_(SteadySeconds()) {}

absl::StatusOr<std::unique_ptr<GrpcCoordinatorClient>> GrpcCoordinatorClient::Create(
    ChannelOptions channel, std::string where, const std::atomic<bool>* stop, ReachOptions reach) {
  channel.reconnect_max_seconds = kReconnectSeconds;
  std::unique_ptr<GrpcCoordinatorClient> client(
      new GrpcCoordinatorClient(channel, std::move(where), stop, std::move(reach)));
  RETURN_IF_ERROR(client->Connect(channel));
  return client;
}

absl::Status GrpcCoordinatorClient::Connect(const ChannelOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(options));
  std::shared_ptr<pb::Coordinator::Stub> stub = pb::Coordinator::NewStub(channel);
  std::lock_guard<std::mutex> lock(mu_);
  channel_options_ = options;
  stub_ = std::move(stub);
  return absl::OkStatus();
}

std::shared_ptr<pb::Coordinator::Stub> GrpcCoordinatorClient::Stub() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stub_;
}

double GrpcCoordinatorClient::reconnect_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channel_options_.reconnect_max_seconds;
}

std::string GrpcCoordinatorClient::address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channel_options_.address;
}

double GrpcCoordinatorClient::SilentSeconds() const {
  return SteadySeconds() - last_answer_.load();
}

bool GrpcCoordinatorClient::GaveUp() const {
  return reach_.give_up_seconds > 0 && SilentSeconds() > reach_.give_up_seconds;
}

double GrpcCoordinatorClient::StopGraceLeft() {
  if (stop_ == nullptr || !stop_->load()) return std::numeric_limits<double>::infinity();
  double unset = -1;  // the grace counts from the first call that saw the stop
  stop_seen_.compare_exchange_strong(unset, SteadySeconds());
  return reach_.stop_grace_seconds - (SteadySeconds() - stop_seen_.load());
}

void GrpcCoordinatorClient::Heard(const grpc::Status& s) {
  if (!Retryable(s)) last_answer_ = SteadySeconds();
}

void GrpcCoordinatorClient::FollowAddressFile() {
  if (reach_.address_file.empty()) return;
  ChannelOptions options;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = SteadySeconds();
    if (now - last_file_check_ < 1.0) return;
    last_file_check_ = now;
    options = channel_options_;
  }
  // A missing or empty file (the coordinator removed it on the way down, or has
  // not written it yet) keeps the address there is.
  absl::StatusOr<std::string> address = ReadAddressFile(reach_.address_file);
  if (!address.ok() || *address == options.address) return;
  std::cerr << where_ << ": the coordinator's address changed in " << reach_.address_file << ": "
            << options.address << " -> " << *address << "\n";
  options.address = *address;
  if (absl::Status s = Connect(options); !s.ok()) {
    std::cerr << where_ << ": cannot follow it: " << s.message() << "\n";
  }
}

absl::Status GrpcCoordinatorClient::UseLeaseTtl(double ttl_seconds) {
  if (!(ttl_seconds > 0)) return absl::OkStatus();  // an old coordinator: keep the default
  const double bound = std::clamp(ttl_seconds / 6.0, 0.05, kReconnectSeconds);
  ChannelOptions options;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bound >= channel_options_.reconnect_max_seconds) return absl::OkStatus();
    options = channel_options_;
  }
  options.reconnect_max_seconds = bound;
  return Connect(options);  // channel arguments are fixed when a channel is made
}

template <typename Request, typename Response>
grpc::Status GrpcCoordinatorClient::Call(
    const char* name,
    grpc::Status (pb::Coordinator::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, Response* response, bool give_up_on_stop) {
  // The group's own calls try in short slices so that a stop request is seen
  // while the coordinator is away; a job's reports wait longer per try, and after
  // a stop request at most stop_grace_seconds.
  const double per_try = give_up_on_stop ? 5.0 : 10.0;
  double backoff = 0.05;
  for (int attempt = 1;; ++attempt) {
    const double grace = StopGraceLeft();
    const bool stopping = std::isfinite(grace);
    double wait = per_try;
    if (stopping && !give_up_on_stop) wait = std::clamp(grace, 0.05, per_try);
    // A try waits for the channel (wait_for_ready) until its deadline: never past
    // the give-up bound, and once past it one short try (the coordinator may be back).
    if (reach_.give_up_seconds > 0) {
      wait = std::min(wait, std::max(1.0, reach_.give_up_seconds - SilentSeconds()));
    }
    auto context = MakeContext(token_, wait, /*wait_for_ready=*/true);
    grpc::Status s = ((*Stub()).*rpc)(context.get(), request, response);
    Heard(s);
    if (!Retryable(s)) return s;
    if (stopping && (give_up_on_stop || StopGraceLeft() <= 0)) return s;
    if (GaveUp()) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("no answer from the coordinator for ", static_cast<int64_t>(SilentSeconds()),
                       " s (", name, ": ", s.error_message(), ")"));
    }
    if (attempt == 1 || attempt % 10 == 0) {
      std::cerr << where_ << ": " << name << ": coordinator unreachable at " << address() << " ("
                << s.error_message() << "); retrying\n";
    }
    FollowAddressFile();
    // A try that waited out its deadline has waited already; one that failed fast
    // (the coordinator shutting down, overloaded) sleeps a little, never longer
    // than the reconnection bound.
    if (s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(reconnect_seconds(), backoff * 2);
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
  // Once the coordinator has been silent past the bound, a beat no longer waits,
  // and once the group is stopping, not past the stop grace.
  const double wait = std::min(GaveUp() ? 0.05 : wait_seconds, std::max(0.05, StopGraceLeft()));
  auto context = MakeContext(token_, wait, /*wait_for_ready=*/true);
  grpc::Status s = Stub()->Heartbeat(context.get(), request, response);
  Heard(s);
  if (Retryable(s)) FollowAddressFile();
  return s;
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
  return Stub()->FailJob(context.get(), request, &none);
}

}  // namespace xmod
