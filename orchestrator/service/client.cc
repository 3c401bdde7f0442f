#include "orchestrator/service/client.h"

#include <cmath>

#include "common/status_macros.h"
#include "proto/channel.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {

namespace pb = ::xmod::v1;

struct RemoteCoordinator::Impl {
  std::unique_ptr<pb::Coordinator::Stub> stub;
  std::string token;
};

RemoteCoordinator::RemoteCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteCoordinator::~RemoteCoordinator() = default;

absl::StatusOr<std::unique_ptr<RemoteCoordinator>> RemoteCoordinator::Connect(
    const std::string& address, const std::string& token, const std::string& tls_ca) {
  ASSIGN_OR_RETURN(auto channel, MakeChannel({address, token, tls_ca}));
  auto impl = std::make_unique<Impl>();
  impl->stub = pb::Coordinator::NewStub(channel);
  impl->token = token;
  return std::unique_ptr<RemoteCoordinator>(new RemoteCoordinator(std::move(impl)));
}

absl::StatusOr<SubmitResult> RemoteCoordinator::Submit(const std::string& yaml,
                                                       const std::string& source,
                                                       bool allow_unidentifiable) {
  pb::SubmitSweepRequest req;
  req.set_spec_yaml(yaml);
  req.set_source(source);
  req.set_allow_unidentifiable(allow_unidentifiable);
  pb::SubmitSweepResponse resp;
  RETURN_IF_ERROR(FromGrpc(
      impl_->stub->SubmitSweep(MakeContext(impl_->token, 60).get(), req, &resp), "SubmitSweep"));
  SubmitResult r;
  r.jobs_in_spec = resp.jobs_in_spec();
  r.new_jobs = resp.new_jobs();
  r.linked_jobs = resp.linked_jobs();
  r.sweep_created = resp.sweep_created();
  return r;
}

absl::StatusOr<std::vector<SweepSummary>> RemoteCoordinator::Status(const std::string& sweep) {
  pb::GetStatusRequest req;
  req.set_sweep(sweep);
  pb::GetStatusResponse resp;
  RETURN_IF_ERROR(FromGrpc(impl_->stub->GetStatus(MakeContext(impl_->token, 30).get(), req, &resp),
                           "GetStatus"));
  std::vector<SweepSummary> out;
  for (const pb::SweepStatus& s : resp.sweeps()) {
    SweepSummary p;
    p.states.sweep = s.sweep();
    p.states.counts = {{JobState::kPending, s.pending()}, {JobState::kLeased, s.leased()},
                       {JobState::kRunning, s.running()}, {JobState::kSucceeded, s.succeeded()},
                       {JobState::kFailed, s.failed()},   {JobState::kCancelled, s.cancelled()}};
    p.states.total = s.total();
    p.flops.done = s.train_flops_done();
    p.flops.total = s.train_flops_total();
    p.flops.standalone = s.standalone_flops_total();
    p.started_at = s.started_at();
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::vector<JobProgressRow>> RemoteCoordinator::ListJobs(const std::string& sweep) {
  pb::ListJobsRequest req;
  req.set_sweep(sweep);
  pb::ListJobsResponse resp;
  RETURN_IF_ERROR(
      FromGrpc(impl_->stub->ListJobs(MakeContext(impl_->token, 30).get(), req, &resp), "ListJobs"));
  std::vector<JobProgressRow> out;
  for (const pb::JobProgress& j : resp.jobs()) {
    JobProgressRow r;
    r.job_id = j.job_id();
    r.family = j.family();
    r.scale = j.scale();
    r.status = j.status();
    r.sparsity = j.sparsity();
    r.train_flops = j.train_flops();
    r.stride = j.stride();
    r.context = j.context();
    r.attempt = j.attempt();
    r.step = j.step();
    r.steps = j.steps();
    r.start_step = j.start_step();
    r.standalone_flops = j.standalone_flops();
    if (!std::isnan(j.final_val_loss())) r.final_val_loss = j.final_val_loss();
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<int64_t> RemoteCoordinator::Resume(const std::string& sweep) {
  pb::ResumeSweepRequest req;
  req.set_sweep(sweep);
  pb::ResumeSweepResponse resp;
  RETURN_IF_ERROR(FromGrpc(
      impl_->stub->ResumeSweep(MakeContext(impl_->token, 30).get(), req, &resp), "ResumeSweep"));
  return resp.resumed();
}

absl::StatusOr<int64_t> RemoteCoordinator::Cancel(const std::string& target) {
  pb::CancelRequest req;
  req.set_target(target);
  pb::CancelResponse resp;
  RETURN_IF_ERROR(
      FromGrpc(impl_->stub->Cancel(MakeContext(impl_->token, 30).get(), req, &resp), "Cancel"));
  return resp.cancelled();
}

}  // namespace xmod
