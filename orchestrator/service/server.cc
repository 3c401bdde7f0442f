#include "orchestrator/service/server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/service/auth.h"
#include "orchestrator/service/request_bounds.h"
#include "proto/channel.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {

namespace pb = ::xmod::v1;

grpc::Status GuardRpc(const char* rpc, const std::function<grpc::Status()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(rpc, ": out of memory while handling the call"));
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(rpc, ": ", e.what()));
  } catch (...) {
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat(rpc, ": unknown exception"));
  }
}

namespace {

AttemptEnd ToAttemptEnd(pb::FailJobRequest::Reason reason, bool retryable) {
  switch (reason) {
    case pb::FailJobRequest::DIVERGED:
      return AttemptEnd::kDiverged;
    case pb::FailJobRequest::PREEMPTED:
      return AttemptEnd::kPreempted;
    default:  // ERROR (FailJob refuses every other value)
      return retryable ? AttemptEnd::kRetryableError : AttemptEnd::kFatalError;
  }
}

class Service final : public pb::Coordinator::Service {
 public:
  Service(Scheduler* scheduler, std::string token, std::string worker_token)
      : scheduler_(scheduler), token_(std::move(token)), worker_token_(std::move(worker_token)) {}

  grpc::Status SubmitSweep(grpc::ServerContext* c, const pb::SubmitSweepRequest* req,
                           pb::SubmitSweepResponse* resp) override {
    return GuardRpc("SubmitSweep", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "SubmitSweep", Role::kOperator); !s.ok()) return s;
      auto r = scheduler_->Submit(req->spec_yaml(), req->source(), req->allow_unidentifiable());
      if (!r.ok()) return ToGrpc(r.status());
      resp->set_jobs_in_spec(r->jobs_in_spec);
      resp->set_new_jobs(r->new_jobs);
      resp->set_linked_jobs(r->linked_jobs);
      resp->set_sweep_created(r->sweep_created);
      return grpc::Status::OK;
    });
  }

  grpc::Status RegisterWorker(grpc::ServerContext* c, const pb::RegisterWorkerRequest* req,
                              pb::RegisterWorkerResponse* resp) override {
    return GuardRpc("RegisterWorker", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "RegisterWorker", Role::kWorker); !s.ok()) return s;
      auto id = scheduler_->RegisterWorker(req->host(), req->ranks(), req->name(), req->build());
      if (!id.ok()) return ToGrpc(id.status());
      resp->set_worker_id(*id);
      resp->set_lease_ttl_seconds(scheduler_->lease_ttl());
      return grpc::Status::OK;
    });
  }

  grpc::Status LeaseJob(grpc::ServerContext* c, const pb::LeaseJobRequest* req,
                        pb::LeaseJobResponse* resp) override {
    return GuardRpc("LeaseJob", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "LeaseJob", Role::kWorker); !s.ok()) return s;
      auto outcome = scheduler_->Lease(req->worker_id(), req->request_id());
      if (!outcome.ok()) return ToGrpc(outcome.status());
      resp->set_lease_ttl_seconds(scheduler_->lease_ttl());
      if (!outcome->grant) {
        resp->set_idle(outcome->done ? pb::LeaseJobResponse::IDLE_DONE
                                     : pb::LeaseJobResponse::IDLE_WAIT);
        return grpc::Status::OK;
      }
      const LeaseGrant& g = *outcome->grant;
      resp->set_has_job(true);
      resp->set_job_id(g.job_id);
      resp->set_job_json(g.config_json);
      resp->set_attempt(g.attempt);
      resp->set_fencing_token(g.fencing_token);
      resp->set_resume_step(g.resume_step);
      resp->set_resume_checkpoint(g.resume_checkpoint);
      resp->set_resume_ranks(g.resume_ranks);
      return grpc::Status::OK;
    });
  }

  grpc::Status Heartbeat(grpc::ServerContext* c, const pb::HeartbeatRequest* req,
                         pb::HeartbeatResponse* resp) override {
    return GuardRpc("Heartbeat", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "Heartbeat", Role::kWorker); !s.ok()) return s;
      auto action =
          scheduler_->Heartbeat(req->worker_id(), req->job_id(), req->fencing_token(), req->step());
      if (!action.ok()) return ToGrpc(action.status());
      resp->set_action(*action == HeartbeatAction::kCancel  ? pb::HeartbeatResponse::CANCEL
                       : *action == HeartbeatAction::kDrain ? pb::HeartbeatResponse::DRAIN
                                                            : pb::HeartbeatResponse::CONTINUE);
      resp->set_lease_ttl_seconds(scheduler_->lease_ttl());
      return grpc::Status::OK;
    });
  }

  grpc::Status ReportMetrics(grpc::ServerContext* c, const pb::ReportMetricsRequest* req,
                             pb::ReportMetricsResponse*) override {
    return GuardRpc("ReportMetrics", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "ReportMetrics", Role::kWorker); !s.ok()) return s;
      std::vector<ReportedMetric> metrics;
      metrics.reserve(req->metrics_size());
      for (const pb::Metric& m : req->metrics()) {
        metrics.push_back({m.name(), m.step(), m.value(), m.tokens(), m.flops()});
      }
      return ToGrpc(scheduler_->ReportMetrics(req->job_id(), req->fencing_token(), metrics));
    });
  }

  grpc::Status ReportCheckpoint(grpc::ServerContext* c, const pb::ReportCheckpointRequest* req,
                                pb::ReportCheckpointResponse*) override {
    return GuardRpc("ReportCheckpoint", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "ReportCheckpoint", Role::kWorker); !s.ok()) return s;
      return ToGrpc(scheduler_->ReportCheckpoint(req->job_id(), req->fencing_token(), req->step(),
                                                 req->path(), req->checksum()));
    });
  }

  grpc::Status CompleteJob(grpc::ServerContext* c, const pb::CompleteJobRequest* req,
                           pb::CompleteJobResponse*) override {
    return GuardRpc("CompleteJob", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "CompleteJob", Role::kWorker); !s.ok()) return s;
      return ToGrpc(scheduler_->Complete(req->job_id(), req->fencing_token(), req->step()));
    });
  }

  grpc::Status FailJob(grpc::ServerContext* c, const pb::FailJobRequest* req,
                       pb::FailJobResponse*) override {
    return GuardRpc("FailJob", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "FailJob", Role::kWorker); !s.ok()) return s;
      // Only the protocol's reasons: an unset or unknown value (a client built from
      // another version of the proto) would otherwise be guessed at.
      if (req->reason() != pb::FailJobRequest::ERROR &&
          req->reason() != pb::FailJobRequest::DIVERGED &&
          req->reason() != pb::FailJobRequest::PREEMPTED) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("FailJob: reason ", static_cast<int>(req->reason()),
                                         " is not ERROR, DIVERGED or PREEMPTED"));
      }
      return ToGrpc(scheduler_
                        ->Fail(req->job_id(), req->fencing_token(),
                               ToAttemptEnd(req->reason(), req->retryable()),
                               absl::StrCat(pb::FailJobRequest::Reason_Name(req->reason()),
                                            " at step ", req->step(), ": ", req->message()),
                               req->step())
                        .status());
    });
  }

  grpc::Status GetStatus(grpc::ServerContext* c, const pb::GetStatusRequest* req,
                         pb::GetStatusResponse* resp) override {
    return GuardRpc("GetStatus", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "GetStatus", Role::kOperator); !s.ok()) return s;
      auto summaries = scheduler_->Status(req->sweep());
      if (!summaries.ok()) return ToGrpc(summaries.status());
      for (const SweepSummary& summary : *summaries) {
        const StateCounts& sc = summary.states;
        pb::SweepStatus* out = resp->add_sweeps();
        out->set_sweep(sc.sweep);
        out->set_pending(sc.counts.at(JobState::kPending));
        out->set_leased(sc.counts.at(JobState::kLeased));
        out->set_running(sc.counts.at(JobState::kRunning));
        out->set_succeeded(sc.counts.at(JobState::kSucceeded));
        out->set_failed(sc.counts.at(JobState::kFailed));
        out->set_cancelled(sc.counts.at(JobState::kCancelled));
        out->set_total(sc.total);
        out->set_train_flops_done(summary.flops.done);
        out->set_train_flops_total(summary.flops.total);
        out->set_standalone_flops_total(summary.flops.standalone);
        out->set_started_at(summary.started_at);
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status ListJobs(grpc::ServerContext* c, const pb::ListJobsRequest* req,
                        pb::ListJobsResponse* resp) override {
    return GuardRpc("ListJobs", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "ListJobs", Role::kOperator); !s.ok()) return s;
      auto progress = scheduler_->Jobs(req->sweep());
      if (!progress.ok()) return ToGrpc(progress.status());
      for (const JobProgressRow& p : *progress) {
        pb::JobProgress* out = resp->add_jobs();
        out->set_job_id(p.job_id);
        out->set_family(p.family);
        out->set_scale(p.scale);
        out->set_sparsity(p.sparsity);
        out->set_stride(p.stride);
        out->set_context(p.context);
        out->set_status(p.status);
        out->set_attempt(p.attempt);
        out->set_step(p.step);
        out->set_steps(p.steps);
        out->set_start_step(p.start_step);
        out->set_standalone_flops(p.standalone_flops);
        out->set_train_flops(p.train_flops);
        out->set_final_val_loss(p.final_val_loss ? *p.final_val_loss : std::nan(""));
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status ResumeSweep(grpc::ServerContext* c, const pb::ResumeSweepRequest* req,
                           pb::ResumeSweepResponse* resp) override {
    return GuardRpc("ResumeSweep", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "ResumeSweep", Role::kOperator); !s.ok()) return s;
      auto n = scheduler_->Resume(req->sweep());
      if (!n.ok()) return ToGrpc(n.status());
      resp->set_resumed(*n);
      return grpc::Status::OK;
    });
  }

  grpc::Status Cancel(grpc::ServerContext* c, const pb::CancelRequest* req,
                      pb::CancelResponse* resp) override {
    return GuardRpc("Cancel", [&]() -> grpc::Status {
      if (auto s = Admit(c, *req, "Cancel", Role::kOperator); !s.ok()) return s;
      auto n = scheduler_->Cancel(req->target());
      if (!n.ok()) return ToGrpc(n.status());
      resp->set_cancelled(*n);
      return grpc::Status::OK;
    });
  }

 private:
  enum class Role { kWorker, kOperator };

  // Every request goes through here: the token and its role, then the size of
  // every string (request_bounds.h).
  grpc::Status Admit(grpc::ServerContext* context, const google::protobuf::Message& request,
                     const char* rpc, Role needed) const {
    if (grpc::Status s = Authorize(context, rpc, needed); !s.ok()) return s;
    return ToGrpc(CheckRequestBounds(request, rpc));
  }

  grpc::Status Authorize(grpc::ServerContext* context, const char* rpc, Role needed) const {
    if (token_.empty()) return grpc::Status::OK;
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    const std::string header =
        it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
    // Both comparisons always run (each in constant time), whichever matches.
    const bool operator_token = TokenMatches(header, token_);
    const bool worker_token = !worker_token_.empty() && TokenMatches(header, worker_token_);
    if (operator_token) return grpc::Status::OK;
    if (worker_token) {
      if (needed == Role::kWorker) return grpc::Status::OK;
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat(rpc, ": a worker token cannot call an operator RPC"));
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong bearer token (authorization metadata)");
  }

  Scheduler* scheduler_;
  std::string token_;
  std::string worker_token_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

struct CoordinatorServer::Impl {
  Scheduler* scheduler = nullptr;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  int port = 0;
  std::thread expirer;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;  // guarded by mu
};

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Scheduler* scheduler, const ServerOptions& options) {
  if (!IsLoopbackAddress(options.listen) && options.token.empty() && !options.insecure) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", options.listen,
                     ": not a loopback address; give --token-file "
                     "(or --insecure to serve without authentication)"));
  }
  if (!options.worker_token.empty() && options.token.empty()) {
    return absl::InvalidArgumentError(
        "--worker-token-file needs --token-file: the operator's token (without one every "
        "caller would be an operator)");
  }
  if (!options.worker_token.empty() && options.worker_token == options.token) {
    return absl::InvalidArgumentError(
        "--worker-token-file and --token-file hold the same token; give each role its own");
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert));
    ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key));
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  // Leases held when a previous coordinator stopped get a full TTL to be renewed.
  RETURN_IF_ERROR(scheduler->GraceLeases().status());
  auto impl = std::make_unique<Impl>();
  impl->scheduler = scheduler;
  impl->service = std::make_unique<Service>(scheduler, options.token, options.worker_token);
  impl->host = options.listen.substr(0, options.listen.rfind(':'));
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, so a second coordinator on the same port
  // would bind too and the kernel would split the clients between the two. Off,
  // a taken port is an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, credentials, &impl->port);
  builder.RegisterService(impl->service.get());
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "--listen ", options.listen,
        ": cannot listen (is the port taken by another process? port 0 picks a free one)"));
  }
  Impl* raw = impl.get();
  const double period = std::max(0.05, scheduler->lease_ttl() / 4.0);
  impl->expirer = std::thread([raw, period] {
    std::unique_lock<std::mutex> lock(raw->mu);
    while (!raw->stopping) {
      raw->cv.wait_for(lock, std::chrono::duration<double>(period));
      if (raw->stopping) break;
      lock.unlock();
      auto expired = raw->scheduler->ExpireLeases();
      if (!expired.ok())
        std::fprintf(stderr, "xmod serve: %s\n", std::string(expired.status().message()).c_str());
      lock.lock();
    }
  });
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

int CoordinatorServer::port() const { return impl_->port; }

std::string CoordinatorServer::listen_address() const {
  return absl::StrCat(impl_->host, ":", impl_->port);
}

std::string CoordinatorServer::address() const {
  const std::string host =
      impl_->host == "0.0.0.0" || impl_->host == "[::]" ? "127.0.0.1" : impl_->host;
  return absl::StrCat(host, ":", impl_->port);
}

void CoordinatorServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->scheduler->SetDraining(true);
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (impl_->expirer.joinable()) impl_->expirer.join();
}

void CoordinatorServer::Wait() { impl_->server->Wait(); }

}  // namespace xmod
