// The real gRPC server on a free loopback port, called through the generated stub.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "orchestrator/service/auth.h"
#include "orchestrator/service/request_bounds.h"
#include "orchestrator/service/server.h"
#include "proto/channel.h"
#include "tests/paths/paths.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {
namespace {

namespace pb = ::xmod::v1;
using ::testing::HasSubstr;

std::string SmokeYaml() {
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token, const std::string& worker_token = "") {
    SqliteStore::Options o;
    o.path = ":memory:";
    store_ = std::move(SqliteStore::Open(o).value());
    scheduler_ = std::make_unique<Scheduler>(store_.get(), SchedulerOptions{});
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.token = token;
    options.worker_token = worker_token;
    auto server = CoordinatorServer::Start(scheduler_.get(), options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = pb::Coordinator::NewStub(MakeChannel({server_->address(), "", ""}).value());
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
    return MakeContext(token, 10);
  }

  // Submits the smoke sweep, registers a worker of 2 ranks and leases one job.
  void SubmitSmokeAndLease(pb::LeaseJobResponse* lease) {
    pb::SubmitSweepRequest submit;
    submit.set_spec_yaml(SmokeYaml());
    submit.set_source("smoke.yaml");
    pb::SubmitSweepResponse submitted;
    ASSERT_TRUE(stub_->SubmitSweep(Context().get(), submit, &submitted).ok());
    pb::RegisterWorkerRequest reg;
    reg.set_host("h");
    reg.set_ranks(2);
    pb::RegisterWorkerResponse worker;
    ASSERT_TRUE(stub_->RegisterWorker(Context().get(), reg, &worker).ok());
    pb::LeaseJobRequest lease_req;
    lease_req.set_worker_id(worker.worker_id());
    ASSERT_TRUE(stub_->LeaseJob(Context().get(), lease_req, lease).ok());
    ASSERT_TRUE(lease->has_job());
  }

  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<pb::Coordinator::Stub> stub_;
};

TEST_F(ServiceTest, AJobGoesThroughLeaseHeartbeatMetricsAndCompletion) {
  Start("");
  pb::SubmitSweepRequest submit;
  submit.set_spec_yaml(SmokeYaml());
  submit.set_source("smoke.yaml");
  pb::SubmitSweepResponse submitted;
  ASSERT_TRUE(stub_->SubmitSweep(Context().get(), submit, &submitted).ok());
  EXPECT_EQ(submitted.new_jobs(), 8);

  pb::RegisterWorkerRequest reg;
  reg.set_host("h");
  reg.set_ranks(2);
  pb::RegisterWorkerResponse worker;
  ASSERT_TRUE(stub_->RegisterWorker(Context().get(), reg, &worker).ok());
  pb::LeaseJobRequest lease_req;
  lease_req.set_worker_id(worker.worker_id());
  pb::LeaseJobResponse lease;
  ASSERT_TRUE(stub_->LeaseJob(Context().get(), lease_req, &lease).ok());
  ASSERT_TRUE(lease.has_job());
  EXPECT_EQ(lease.attempt(), 1);

  pb::HeartbeatRequest hb;
  hb.set_worker_id(worker.worker_id());
  hb.set_job_id(lease.job_id());
  hb.set_fencing_token(lease.fencing_token());
  hb.set_step(1);
  pb::HeartbeatResponse beat;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), hb, &beat).ok());
  EXPECT_EQ(beat.action(), pb::HeartbeatResponse::CONTINUE);

  pb::ReportMetricsRequest metrics;
  metrics.set_job_id(lease.job_id());
  metrics.set_fencing_token(lease.fencing_token());
  pb::Metric* m = metrics.add_metrics();
  m->set_name("train_loss");
  m->set_step(1);
  m->set_value(std::nan(""));
  pb::ReportMetricsResponse none;
  grpc::Status bad = stub_->ReportMetrics(Context().get(), metrics, &none);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("not finite"));
  m->set_value(4.0);
  ASSERT_TRUE(stub_->ReportMetrics(Context().get(), metrics, &none).ok());
  metrics.set_fencing_token(lease.fencing_token() + 100);
  EXPECT_EQ(stub_->ReportMetrics(Context().get(), metrics, &none).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  metrics.set_job_id("nope");
  EXPECT_EQ(stub_->ReportMetrics(Context().get(), metrics, &none).error_code(),
            grpc::StatusCode::NOT_FOUND);

  pb::CompleteJobRequest complete;
  complete.set_job_id(lease.job_id());
  complete.set_fencing_token(lease.fencing_token());
  const int64_t steps = nlohmann::json::parse(lease.job_json()).at("steps").get<int64_t>();
  complete.set_step(steps - 1);  // only at the last step
  pb::CompleteJobResponse done;
  EXPECT_EQ(stub_->CompleteJob(Context().get(), complete, &done).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  complete.set_step(steps);
  ASSERT_TRUE(stub_->CompleteJob(Context().get(), complete, &done).ok());
  pb::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), pb::GetStatusRequest(), &status).ok());
  ASSERT_EQ(status.sweeps_size(), 1);
  EXPECT_EQ(status.sweeps(0).succeeded(), 1);
  EXPECT_EQ(status.sweeps(0).pending(), 7);
}

TEST_F(ServiceTest, AMalformedSweepIsInvalidArgumentNamingTheLine) {
  Start("");
  pb::SubmitSweepRequest submit;
  submit.set_spec_yaml("name: x\nbudget: {tokens: -1}\n");
  submit.set_source("x.yaml");
  pb::SubmitSweepResponse r;
  grpc::Status s = stub_->SubmitSweep(Context().get(), submit, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("x.yaml:2: budget.tokens: must be positive"));
}

// The RPC is a submit path like `xmod submit --db`: a sweep that cannot identify
// the laws it names is refused with the design check's file:line message unless
// the request says otherwise.
TEST_F(ServiceTest, AnUnidentifiableSweepIsRefusedUnlessTheRequestAllowsIt) {
  Start("");
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/sweeps/xmod-cluster.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string budgets = "tokens_per_param: [10, 20, 40]";
  ASSERT_NE(yaml.find(budgets), std::string::npos);
  yaml.replace(yaml.find(budgets), budgets.size(), "tokens_per_param: 20");
  pb::SubmitSweepRequest submit;
  submit.set_spec_yaml(yaml);
  submit.set_source("one-budget.yaml");
  pb::SubmitSweepResponse r;
  grpc::Status s = stub_->SubmitSweep(Context().get(), submit, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("one-budget.yaml:"));
  EXPECT_THAT(s.error_message(), HasSubstr("D proportional to N"));
  pb::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.sweeps_size(), 0);  // nothing written
  submit.set_allow_unidentifiable(true);
  s = stub_->SubmitSweep(Context().get(), submit, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(r.new_jobs(), 0);
}

// FailJob takes only the protocol's reasons; an unset or unknown one is refused
// and the lease stays as it was.
TEST_F(ServiceTest, FailJobWithAReasonOutsideTheProtocolIsRefused) {
  Start("");
  pb::LeaseJobResponse lease;
  ASSERT_NO_FATAL_FAILURE(SubmitSmokeAndLease(&lease));
  pb::FailJobRequest fail;
  fail.set_job_id(lease.job_id());
  fail.set_fencing_token(lease.fencing_token());
  fail.set_retryable(true);
  pb::FailJobResponse none;
  for (int reason : {0, 7}) {
    fail.set_reason(static_cast<pb::FailJobRequest::Reason>(reason));
    grpc::Status s = stub_->FailJob(Context().get(), fail, &none);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << reason;
    EXPECT_THAT(s.error_message(), HasSubstr("is not ERROR, DIVERGED or PREEMPTED"));
  }
  pb::GetStatusResponse status;
  ASSERT_TRUE(stub_->GetStatus(Context().get(), pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.sweeps(0).leased(), 1);  // still held
  EXPECT_EQ(status.sweeps(0).failed(), 0);
  fail.set_reason(pb::FailJobRequest::ERROR);
  EXPECT_TRUE(stub_->FailJob(Context().get(), fail, &none).ok());
}

// Every string of every request is bounded: an id, host or metric name of
// megabytes is refused before anything is stored, nested fields included, and a
// request over the receive limit never reaches a handler.
TEST_F(ServiceTest, OversizedStringsAreRefusedNamingTheRpcAndField) {
  Start("");
  pb::RegisterWorkerRequest reg;
  reg.set_host(std::string(1 << 20, 'h'));
  reg.set_ranks(1);
  pb::RegisterWorkerResponse worker;
  grpc::Status s = stub_->RegisterWorker(Context().get(), reg, &worker);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("RegisterWorker: host: 1048576 bytes, more than 256"));
  EXPECT_EQ(store_->Query("SELECT COUNT(*) FROM workers").value().rows[0][0], Value(int64_t{0}));

  pb::ReportMetricsRequest metrics;
  metrics.set_job_id("j");
  metrics.set_fencing_token(1);
  metrics.add_metrics()->set_name("train_loss");
  metrics.add_metrics()->set_name(std::string(257, 'n'));
  pb::ReportMetricsResponse none;
  s = stub_->ReportMetrics(Context().get(), metrics, &none);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("ReportMetrics: metrics[1].name: 257 bytes, more than 256"));

  pb::SubmitSweepRequest submit;
  submit.set_spec_yaml(std::string((4 << 20) + 1, '#'));
  pb::SubmitSweepResponse r;
  s = stub_->SubmitSweep(Context().get(), submit, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("SubmitSweep: spec_yaml: 4194305 bytes"));
  submit.set_spec_yaml(std::string(kMaxRequestBytes + 1, '#'));
  EXPECT_EQ(stub_->SubmitSweep(Context().get(), submit, &r).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);  // over the receive limit
  // At the limits, requests pass the bounds (and fail, if at all, for other reasons).
  reg.set_host(std::string(256, 'h'));
  EXPECT_TRUE(stub_->RegisterWorker(Context().get(), reg, &worker).ok());
}

TEST_F(ServiceTest, CallsWithoutTheRightTokenAreUnauthenticated) {
  Start("s3cret");
  pb::GetStatusResponse status;
  EXPECT_EQ(stub_->GetStatus(Context().get(), pb::GetStatusRequest(), &status).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->GetStatus(Context("wrong!").get(), pb::GetStatusRequest(), &status).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(stub_->GetStatus(Context("s3cret").get(), pb::GetStatusRequest(), &status).ok());
}

// Roles: a worker token leases, heartbeats and reports, and nothing an operator
// does; the operator's token does everything; anything else is unauthenticated.
TEST_F(ServiceTest, AWorkerTokenCanWorkButNotOperate) {
  Start("op-token", "worker-token");
  pb::SubmitSweepRequest submit;
  submit.set_spec_yaml(SmokeYaml());
  submit.set_source("smoke.yaml");
  pb::SubmitSweepResponse submitted;
  EXPECT_EQ(stub_->SubmitSweep(Context("worker-token").get(), submit, &submitted).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_->Query("SELECT COUNT(*) FROM jobs").value().rows[0][0], Value(int64_t{0}));
  ASSERT_TRUE(stub_->SubmitSweep(Context("op-token").get(), submit, &submitted).ok());

  pb::RegisterWorkerRequest reg;
  reg.set_host("h");
  reg.set_ranks(1);
  pb::RegisterWorkerResponse worker;
  ASSERT_TRUE(stub_->RegisterWorker(Context("worker-token").get(), reg, &worker).ok());
  pb::LeaseJobRequest lease_req;
  lease_req.set_worker_id(worker.worker_id());
  pb::LeaseJobResponse lease;
  ASSERT_TRUE(stub_->LeaseJob(Context("worker-token").get(), lease_req, &lease).ok());
  ASSERT_TRUE(lease.has_job());
  pb::HeartbeatRequest hb;
  hb.set_worker_id(worker.worker_id());
  hb.set_job_id(lease.job_id());
  hb.set_fencing_token(lease.fencing_token());
  pb::HeartbeatResponse beat;
  EXPECT_TRUE(stub_->Heartbeat(Context("worker-token").get(), hb, &beat).ok());

  pb::CancelRequest cancel;
  cancel.set_target("smoke");
  pb::CancelResponse cancelled;
  EXPECT_EQ(stub_->Cancel(Context("worker-token").get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  pb::ResumeSweepRequest resume;
  resume.set_sweep("smoke");
  pb::ResumeSweepResponse resumed;
  EXPECT_EQ(stub_->ResumeSweep(Context("worker-token").get(), resume, &resumed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  pb::GetStatusResponse status;
  EXPECT_EQ(
      stub_->GetStatus(Context("worker-token").get(), pb::GetStatusRequest(), &status).error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(
      stub_->GetStatus(Context("neither").get(), pb::GetStatusRequest(), &status).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->LeaseJob(Context("neither").get(), lease_req, &lease).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // The operator may do a worker's calls too (one token for a small setup).
  EXPECT_TRUE(stub_->Heartbeat(Context("op-token").get(), hb, &beat).ok());
  EXPECT_TRUE(stub_->GetStatus(Context("op-token").get(), pb::GetStatusRequest(), &status).ok());
  EXPECT_EQ(
      store_->Query("SELECT COUNT(*) FROM jobs WHERE status = 'cancelled'").value().rows[0][0],
      Value(int64_t{0}));
}

TEST(Server, NoHandlerAnswersUnknown) {
  const grpc::Status oom =
      GuardRpc("SubmitSweep", []() -> grpc::Status { throw std::bad_alloc(); });
  EXPECT_EQ(oom.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(oom.error_message(), HasSubstr("SubmitSweep"));
  const grpc::Status thrown =
      GuardRpc("LeaseJob", []() -> grpc::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(thrown.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(thrown.error_message(), "LeaseJob: boom");
  EXPECT_TRUE(GuardRpc("GetStatus", [] { return grpc::Status::OK; }).ok());
}

TEST(Server, AWorkerTokenNeedsItsOwnOperatorToken) {
  SqliteStore::Options o;
  o.path = ":memory:";
  auto store = SqliteStore::Open(o).value();
  Scheduler scheduler(store.get(), SchedulerOptions{});
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.worker_token = "w";
  EXPECT_EQ(CoordinatorServer::Start(&scheduler, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.token = "w";
  EXPECT_EQ(CoordinatorServer::Start(&scheduler, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.token = "o";
  EXPECT_TRUE(CoordinatorServer::Start(&scheduler, options).ok());
}

TEST(Server, RefusesANonLoopbackAddressWithoutATokenUnlessInsecure) {
  SqliteStore::Options o;
  o.path = ":memory:";
  auto store = SqliteStore::Open(o).value();
  Scheduler scheduler(store.get(), SchedulerOptions{});
  ServerOptions options;
  options.listen = "0.0.0.0:0";
  auto refused = CoordinatorServer::Start(&scheduler, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--token-file"));
  options.insecure = true;
  EXPECT_TRUE(CoordinatorServer::Start(&scheduler, options).ok());
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:1"));
}

// A self-signed certificate made with the openssl tool for "localhost": a client
// that trusts it gets through; a plaintext client does not.
TEST(Server, ServesTlsWhenGivenACertificateAndKey) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("xmod_tls_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a certificate";
  SqliteStore::Options o;
  o.path = ":memory:";
  auto store = SqliteStore::Open(o).value();
  Scheduler scheduler(store.get(), SchedulerOptions{});
  ServerOptions options;
  options.listen = "localhost:0";
  options.tls_cert = dir + "/cert.pem";
  options.tls_key = dir + "/key.pem";
  auto server = CoordinatorServer::Start(&scheduler, options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "localhost:" + std::to_string((*server)->port());
  auto secure = pb::Coordinator::NewStub(MakeChannel({address, "", dir + "/cert.pem"}).value());
  pb::GetStatusResponse status;
  EXPECT_TRUE(secure->GetStatus(MakeContext("", 10).get(), pb::GetStatusRequest(), &status).ok());
  auto plain = pb::Coordinator::NewStub(MakeChannel({address, "", ""}).value());
  EXPECT_FALSE(plain->GetStatus(MakeContext("", 3).get(), pb::GetStatusRequest(), &status).ok());
  options.tls_key.clear();
  EXPECT_EQ(CoordinatorServer::Start(&scheduler, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(Server, TokenComparisonNeedsTheExactBearerValue) {
  EXPECT_TRUE(TokenMatches("Bearer abc", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abd", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer ab", "abc"));
  EXPECT_FALSE(TokenMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(TokenMatches("abc", "abc"));
}

}  // namespace
}  // namespace xmod
