#include "worker/client/worker_group.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/cpus.h"
#include "common/job_file.h"
#include "common/status_macros.h"
#include "proto/channel.h"
#include "worker/client/coordinator_client.h"
#include "worker/client/group_command.h"
#include "worker/client/job_session.h"
#include "worker/dist/communicator.h"
#include "worker/train/trainer.h"

namespace xmod {

namespace pb = ::xmod::v1;

namespace {

std::atomic<bool> g_stop_requested{false};

std::string HostName() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// Fault injection for the end-to-end tests: XMOD_FAULT_STOP_AT_CHECKPOINT=STEP makes
// rank 0 stop itself (SIGSTOP, as a frozen node would) once the files of its
// checkpoint at STEP are written, before they are published; SIGCONT wakes it.
// Unset (always, outside tests): nothing.
std::function<void(int64_t)> FaultStopAtCheckpoint() {
  const char* text = std::getenv("XMOD_FAULT_STOP_AT_CHECKPOINT");
  if (text == nullptr || *text == '\0') return nullptr;
  const int64_t at = std::atoll(text);
  return [at](int64_t step) {
    if (step != at) return;
    std::cerr << "fault injection: stopping at the checkpoint of step " << step
              << " before publishing it" << std::endl;
    ::raise(SIGSTOP);
  };
}

TrainerOptions TrainerOptionsFor(const WorkerGroupOptions& o, const JobFile& job,
                                 int64_t resume_step) {
  TrainerOptions t;
  t.run_dir = o.run_dir + "/" + job.id;
  t.resume = true;
  t.resume_step = resume_step;
  t.threads = o.threads;
  t.device = o.device;
  return t;
}

absl::Status BroadcastExit(Communicator& comm) {
  std::string bytes = EncodeGroupCommand({GroupCommand::Kind::kExit, 0, ""});
  return comm.Broadcast(&bytes, 0);
}

// --coordinator, or the first address in --coordinator-file, waiting for the file
// (as long as the coordinator may be silent) when it is not there yet.
absl::StatusOr<std::string> FirstAddress(const WorkerGroupOptions& o, const std::string& where) {
  if (!o.coordinator.empty()) return o.coordinator;
  const double start = SteadySeconds();
  for (bool said = false;; said = true) {
    absl::StatusOr<std::string> address = ReadAddressFile(o.coordinator_file);
    if (address.ok()) return address;
    if (!said) std::cerr << where << ": waiting for " << o.coordinator_file << "\n";
    if (g_stop_requested) return absl::CancelledError("stopped");
    if (o.unreachable_seconds > 0 && SteadySeconds() - start > o.unreachable_seconds) {
      return absl::UnavailableError(absl::StrCat("no coordinator address after ",
                                                 o.unreachable_seconds,
                                                 " s: ", address.status().message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

absl::Status GaveUp(const GrpcCoordinatorClient& client, const WorkerGroupOptions& o) {
  return absl::UnavailableError(absl::StrCat(
      "no answer from the coordinator at ", client.address(), " for ",
      static_cast<int64_t>(client.SilentSeconds()), " s (--unreachable-timeout ",
      o.unreachable_seconds,
      "): the group exits so that its allocation is freed; a job it held resumes from its last "
      "recorded checkpoint once its lease runs out"));
}

// Registers rank 0's group with the coordinator and returns its worker id, or
// "" when the group was asked to stop meanwhile. On any failure the other ranks
// have been told to exit.
absl::StatusOr<std::string> RegisterGroup(const WorkerGroupOptions& o, Communicator& comm,
                                          GrpcCoordinatorClient& client) {
  pb::RegisterWorkerRequest reg;
  reg.set_host(HostName());
  reg.set_ranks(comm.size());
  reg.set_name(o.name);
  reg.set_build(WorkerBuild(o.device).dump());
  pb::RegisterWorkerResponse registered;
  grpc::Status s = client.Register(reg, &registered);
  if (!s.ok()) {
    RETURN_IF_ERROR(BroadcastExit(comm));
    if (g_stop_requested) return std::string();
    if (client.GaveUp()) return GaveUp(client, o);
    return FromGrpc(s, "RegisterWorker");
  }
  const std::string worker_id = registered.worker_id();
  RETURN_IF_ERROR(client.UseLeaseTtl(registered.lease_ttl_seconds()));
  std::string why = "--threads";
  const int threads =
      o.threads > 0 ? o.threads : DefaultThreadsPerRank(LocalRanks(comm.size()), &why);
  std::cerr << comm.Where() << ": worker group " << worker_id << " (" << comm.size()
            << " ranks) registered with " << client.address() << "; " << threads
            << " LibTorch threads per rank (" << why << ")\n";
  return worker_id;
}

// The trainer's options for one lease: its hooks report through `session`.
TrainerOptions LeaseTrainerOptions(const WorkerGroupOptions& o, const JobFile& job,
                                   const pb::LeaseJobResponse& lease, JobSession& session) {
  TrainerOptions t = TrainerOptionsFor(o, job, lease.resume_step());
  t.preempt = [&session] { return session.ShouldStop(); };
  t.abandon = [&session] { return session.ShouldAbandon(); };
  t.confirm_checkpoint = [&session] { return session.ConfirmLease(); };
  t.fencing_token = lease.fencing_token();
  t.fault_checkpoint_written = FaultStopAtCheckpoint();
  t.on_metrics = [&session](const std::vector<Metric>& m) { session.OnMetrics(m); };
  t.on_checkpoint = [&session](int64_t step, const std::string& path) {
    return session.OnCheckpoint(step, path);
  };
  t.on_step = [&session](int64_t step) { session.OnStep(step); };
  return t;
}

// Trains one leased job on every rank and reports its end. A job file that does
// not parse, a job this worker cannot run and data that does not open end the
// attempt here, before anything is broadcast (the other ranks still wait for a
// command). Errors are the broadcast's only.
absl::Status TrainLease(const WorkerGroupOptions& o, Communicator& comm,
                        GrpcCoordinatorClient& client, const JobSessionOptions& session_options,
                        const std::string& worker_id, const pb::LeaseJobResponse& lease) {
  JobSession session(client, session_options, worker_id, lease.job_id(), lease.fencing_token(),
                     lease.resume_step());
  auto job = ParseJobFile(lease.job_json(), absl::StrCat("job file of ", lease.job_id()));
  if (!job.ok()) {
    std::cerr << comm.Where() << ": " << job.status().message() << "\n";
    session.Refuse(job.status());  // no retry can fix the job's own file
    return absl::OkStatus();
  }
  if (absl::Status can = CheckWorkerCanRun(*job); !can.ok()) {
    std::cerr << comm.Where() << ": " << can.message() << "\n";
    session.Refuse(can);
    return absl::OkStatus();
  }
  auto data = OpenJobData(*job);
  if (!data.ok()) {
    session.Finish(absl::InternalError(absl::StrCat(comm.Where(), ": ", data.status().message())));
    return absl::OkStatus();
  }
  std::string bytes =
      EncodeGroupCommand({GroupCommand::Kind::kTrain, lease.resume_step(), lease.job_json()});
  RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
  session.StartHeartbeat(lease.lease_ttl_seconds());
  const TrainerOptions t = LeaseTrainerOptions(o, *job, lease, session);
  std::cerr << comm.Where() << ": job " << job->id << " attempt " << lease.attempt()
            << (lease.resume_step() > 0 ? absl::StrCat(" from step ", lease.resume_step()) : "")
            << "\n";
  if (lease.resume_ranks() > 0 && lease.resume_ranks() != comm.size()) {
    // The batch is split over the ranks, not sized by them: the same run goes on,
    // equal up to the order of floating-point reductions.
    std::cerr << comm.Where() << ": job " << job->id << ": elastic resume: its checkpoint at "
              << "step " << lease.resume_step() << " was written by a group of "
              << lease.resume_ranks() << " rank(s); it continues on " << comm.size() << "\n";
  }
  absl::StatusOr<TrainResult> result = Train(*job, **data, comm, t);
  session.StopHeartbeat();
  session.Finish(result);
  if (!result.ok()) {
    // The other ranks may be waiting in a collective this rank left: end the
    // world (the failure is recorded; the job is retried elsewhere).
    std::cerr << comm.Where() << ": " << result.status().message() << "; ending the group\n";
    comm.Abort(1);
  }
  return absl::OkStatus();
}

// Rank 0: decides what the group does next and tells the other ranks.
absl::Status Lead(const WorkerGroupOptions& o, Communicator& comm) {
  absl::StatusOr<std::string> address = FirstAddress(o, comm.Where());
  if (!address.ok()) {
    RETURN_IF_ERROR(BroadcastExit(comm));
    return g_stop_requested ? absl::OkStatus() : address.status();
  }
  ChannelOptions channel_options{*address, o.token, o.tls_ca};
  ReachOptions reach;
  reach.address_file = o.coordinator_file;
  reach.give_up_seconds = o.unreachable_seconds;
  ASSIGN_OR_RETURN(
      std::unique_ptr<GrpcCoordinatorClient> made,
      GrpcCoordinatorClient::Create(channel_options, comm.Where(), &g_stop_requested, reach));
  GrpcCoordinatorClient& client = *made;
  ASSIGN_OR_RETURN(const std::string worker_id, RegisterGroup(o, comm, client));
  if (worker_id.empty()) return absl::OkStatus();  // stopped while registering

  JobSessionOptions session_options;
  session_options.metrics_batch = o.metrics_batch;
  session_options.stall_seconds = o.stall_seconds;
  session_options.stop = &g_stop_requested;
  int64_t lease_requests = 0;
  while (!g_stop_requested) {
    pb::LeaseJobRequest req;
    req.set_worker_id(worker_id);
    // Retries of this request (inside client.Lease) carry the same id.
    req.set_request_id(absl::StrCat(++lease_requests));
    pb::LeaseJobResponse lease;
    const grpc::Status s = client.Lease(req, &lease);
    if (!s.ok()) {
      if (g_stop_requested) break;
      RETURN_IF_ERROR(BroadcastExit(comm));
      if (client.GaveUp()) return GaveUp(client, o);
      return FromGrpc(s, "LeaseJob");
    }
    if (!lease.has_job()) {
      if (lease.idle() == pb::LeaseJobResponse::IDLE_DONE || o.exit_when_idle) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
      continue;
    }
    // A coordinator restarted with a shorter TTL tightens reconnection too.
    RETURN_IF_ERROR(client.UseLeaseTtl(lease.lease_ttl_seconds()));
    RETURN_IF_ERROR(TrainLease(o, comm, client, session_options, worker_id, lease));
    if (client.GaveUp()) {
      RETURN_IF_ERROR(BroadcastExit(comm));
      return GaveUp(client, o);
    }
  }
  return BroadcastExit(comm);
}

// Ranks other than 0: train whatever rank 0 broadcasts, until told to exit.
absl::Status Follow(const WorkerGroupOptions& o, Communicator& comm) {
  while (true) {
    std::string bytes;
    RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
    ASSIGN_OR_RETURN(GroupCommand command, DecodeGroupCommand(bytes));
    if (command.kind == GroupCommand::Kind::kExit) return absl::OkStatus();
    // Rank 0 parsed the same bytes and opened the same data before broadcasting;
    // failing here (e.g. a path missing on this node) ends the group, and the
    // job's lease runs out.
    auto job = ParseJobFile(command.job_json, "job file from rank 0");
    absl::StatusOr<std::unique_ptr<TokenSource>> data =
        job.ok() ? OpenJobData(*job) : absl::StatusOr<std::unique_ptr<TokenSource>>(job.status());
    if (!data.ok()) {
      std::cerr << comm.Where() << ": " << data.status().message() << "; ending the group\n";
      comm.Abort(1);
    }
    auto result = Train(*job, **data, comm, TrainerOptionsFor(o, *job, command.resume_step));
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
