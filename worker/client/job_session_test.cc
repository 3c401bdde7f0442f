#include "worker/client/job_session.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>

namespace xmod {
namespace {

namespace pb = ::xmod::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A coordinator in memory: records every call in order and answers what the test
// queued (OK when nothing is queued).
class FakeCoordinator : public CoordinatorClient {
 public:
  grpc::Status Heartbeat(const pb::HeartbeatRequest& r, pb::HeartbeatResponse* out,
                         double wait_seconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("Heartbeat");
    last_wait = wait_seconds;
    last_heartbeat = r;
    out->set_action(action);
    return Next(&heartbeat_status);
  }
  grpc::Status ReportMetrics(const pb::ReportMetricsRequest& r) override {
    // A coordinator that is away: the call waits (the real client retries
    // through an outage), outside the lock so heartbeats go on.
    if (metrics_delay_seconds > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(metrics_delay_seconds));
    }
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("ReportMetrics:" + std::to_string(r.metrics_size()));
    grpc::Status s = Next(&metrics_status);
    if (s.ok()) {
      for (const pb::Metric& m : r.metrics()) stored_steps.push_back(m.step());
    }
    return s;
  }
  grpc::Status ReportCheckpoint(const pb::ReportCheckpointRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("ReportCheckpoint:" + std::to_string(r.step()));
    checkpoint = r;
    return grpc::Status::OK;
  }
  grpc::Status CompleteJob(const pb::CompleteJobRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("CompleteJob:" + std::to_string(r.step()));
    return grpc::Status::OK;
  }
  grpc::Status FailJob(const pb::FailJobRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("FailJob");
    fail = r;
    return grpc::Status::OK;
  }
  grpc::Status FailJobOnce(const pb::FailJobRequest& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls.push_back("FailJobOnce");
    fail = r;
    return grpc::Status::OK;
  }

  bool GaveUp() const override { return gave_up; }
  std::atomic<bool> gave_up{false};

  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls;
  }
  std::vector<std::string> calls;
  std::vector<int64_t> stored_steps;
  std::deque<grpc::Status> metrics_status, heartbeat_status;
  pb::HeartbeatResponse::Action action = pb::HeartbeatResponse::CONTINUE;
  pb::HeartbeatRequest last_heartbeat;
  double last_wait = 0;
  double metrics_delay_seconds = 0;
  pb::ReportCheckpointRequest checkpoint;
  pb::FailJobRequest fail;

 private:
  static grpc::Status Next(std::deque<grpc::Status>* queue) {
    if (queue->empty()) return grpc::Status::OK;
    grpc::Status s = queue->front();
    queue->pop_front();
    return s;
  }
  std::mutex mu_;
};

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "down");
const grpc::Status kStale(grpc::StatusCode::FAILED_PRECONDITION, "fencing token 7 is stale");

std::vector<Metric> Losses(int64_t step) { return {{"train_loss", step, 1.0 / step, step, 1.0}}; }

JobSessionOptions Options(int64_t batch = 100) {
  JobSessionOptions o;
  o.metrics_batch = batch;
  o.flush_seconds = 1e9;  // flushes only by size, checkpoint or finish
  o.stall_seconds = 0;
  return o;
}

TrainResult Succeeded(int64_t step) {
  TrainResult r;
  r.step = step;
  return r;
}

TEST(JobSession, MetricsGoOutInBatchesAndLandBeforeEachCheckpoint) {
  FakeCoordinator fake;
  JobSession session(fake, Options(3), "w", "job", 7);
  for (int64_t step = 1; step <= 4; ++step) session.OnMetrics(Losses(step));
  session.OnCheckpoint(4, "/nonexistent/step-4");
  session.Finish(Succeeded(4));
  EXPECT_THAT(fake.Calls(), ElementsAre("ReportMetrics:3", "ReportMetrics:1", "ReportCheckpoint:4",
                                        "CompleteJob:4"));
  EXPECT_THAT(fake.stored_steps, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(fake.checkpoint.fencing_token(), 7);
}

TEST(JobSession, UndeliveredMetricsAreKeptBlockTheCheckpointAndTheCompletion) {
  FakeCoordinator fake;
  JobSession session(fake, Options(2), "w", "job", 7);
  fake.metrics_status = {kUnavailable, kUnavailable};
  session.OnMetrics(Losses(1));
  session.OnMetrics(Losses(2));                    // batch full: first try fails, kept
  session.OnCheckpoint(2, "/nonexistent/step-2");  // second try fails: no checkpoint
  EXPECT_FALSE(session.lost());
  session.Finish(Succeeded(2));  // third try lands; then complete
  EXPECT_THAT(fake.Calls(), ElementsAre("ReportMetrics:2", "ReportMetrics:2", "ReportMetrics:2",
                                        "CompleteJob:2"));
  EXPECT_THAT(fake.stored_steps, ElementsAre(1, 2));

  FakeCoordinator down;
  JobSession never(down, Options(1), "w", "job", 8);
  down.metrics_status = {kUnavailable, kUnavailable};
  never.OnMetrics(Losses(1));
  never.Finish(Succeeded(1));
  // A job whose rows never landed is not completed: the next attempt redoes them.
  EXPECT_THAT(down.Calls(), ElementsAre("ReportMetrics:1", "ReportMetrics:1", "FailJob"));
  EXPECT_EQ(down.fail.reason(), pb::FailJobRequest::ERROR);
  EXPECT_TRUE(down.fail.retryable());
  EXPECT_THAT(down.fail.message(), HasSubstr("metrics could not be delivered"));
}

TEST(JobSession, AStaleLeaseStopsEveryWrite) {
  FakeCoordinator fake;
  JobSession session(fake, Options(1), "w", "job", 7);
  fake.metrics_status = {kStale};
  session.OnMetrics(Losses(1));
  EXPECT_TRUE(session.lost());
  EXPECT_TRUE(session.ShouldAbandon());
  session.OnMetrics(Losses(2));
  session.OnCheckpoint(2, "/nonexistent/step-2");
  session.Finish(Succeeded(2));
  EXPECT_THAT(fake.Calls(), ElementsAre("ReportMetrics:1"));
}

TEST(JobSession, HeartbeatsCarryTheStepAndObeyCancelAndDrain) {
  FakeCoordinator fake;
  JobSession session(fake, Options(), "w1", "job", 7);
  session.OnStep(12);
  EXPECT_TRUE(session.ConfirmLease());
  EXPECT_EQ(fake.last_heartbeat.worker_id(), "w1");
  EXPECT_EQ(fake.last_heartbeat.step(), 12);
  EXPECT_EQ(fake.last_heartbeat.fencing_token(), 7);

  fake.heartbeat_status = {kUnavailable};
  EXPECT_TRUE(session.ConfirmLease());  // unreachable: still ours for now

  fake.action = pb::HeartbeatResponse::DRAIN;
  session.ConfirmLease();
  EXPECT_TRUE(session.ShouldStop());
  EXPECT_FALSE(session.ShouldAbandon());

  fake.action = pb::HeartbeatResponse::CANCEL;
  EXPECT_FALSE(session.ConfirmLease());
  EXPECT_TRUE(session.cancelled());
  session.OnMetrics(Losses(13));
  session.Finish(Succeeded(13));  // cancelled: nothing more is written
  EXPECT_EQ(fake.Calls().size(), 4u);
}

TEST(JobSession, AResumedAttemptsStepsStartAtItsCheckpoint) {
  FakeCoordinator fake;
  JobSession session(fake, Options(), "w", "job", 7, /*resume_step=*/500);
  session.ConfirmLease();  // before any step: the resume step, never 0
  EXPECT_EQ(fake.last_heartbeat.step(), 500);
  session.Finish(absl::InternalError("data gone"));
  EXPECT_EQ(fake.fail.step(), 500);
}

TEST(JobSession, TheGroupStopFlagAsksForACheckpointedStop) {
  FakeCoordinator fake;
  std::atomic<bool> stop{false};
  JobSessionOptions o = Options();
  o.stop = &stop;
  JobSession session(fake, o, "w", "job", 7);
  EXPECT_FALSE(session.ShouldStop());
  stop = true;
  EXPECT_TRUE(session.ShouldStop());
  TrainResult stopped = Succeeded(5);
  stopped.outcome = TrainOutcome::kStopped;
  stopped.message = "stopped at step 5";
  session.Finish(stopped);
  EXPECT_EQ(fake.fail.reason(), pb::FailJobRequest::PREEMPTED);
  EXPECT_EQ(fake.fail.step(), 5);
}

TEST(JobSession, ACoordinatorSilentPastTheBoundAsksForACheckpointedStop) {
  FakeCoordinator fake;
  JobSession session(fake, Options(), "w", "job", 7);
  EXPECT_FALSE(session.ShouldStop());
  fake.gave_up = true;
  EXPECT_TRUE(session.ShouldStop());
  EXPECT_FALSE(session.ShouldAbandon());  // the job is still ours until the lease runs out
}

// The real client against a port nothing listens on.
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t n = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);  // bound once, now free and not listening
  return ntohs(a.sin_port);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(GrpcCoordinatorClient, GivesUpOnASilentCoordinatorAfterItsBound) {
  ChannelOptions channel;
  channel.address = "127.0.0.1:" + std::to_string(ClosedPort());
  ReachOptions reach;
  reach.give_up_seconds = 1.5;
  auto client = GrpcCoordinatorClient::Create(channel, "test", nullptr, reach);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE((*client)->GaveUp());
  const auto start = std::chrono::steady_clock::now();
  pb::ReportMetricsRequest r;
  const grpc::Status s = (*client)->ReportMetrics(r);  // retried until the bound
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("no answer from the coordinator"));
  EXPECT_GE(Seconds(start), 1.0);  // silence counts from the client's creation
  EXPECT_LT(Seconds(start), 15.0);
  EXPECT_TRUE((*client)->GaveUp());
  // Past the bound a call makes one short try instead of retrying.
  const auto again = std::chrono::steady_clock::now();
  EXPECT_EQ((*client)->CompleteJob(pb::CompleteJobRequest()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(Seconds(again), 4.0);
}

TEST(GrpcCoordinatorClient, AStopRequestBoundsAReportsRetries) {
  ChannelOptions channel;
  channel.address = "127.0.0.1:" + std::to_string(ClosedPort());
  std::atomic<bool> stop{true};
  ReachOptions reach;  // never gives up by itself
  reach.stop_grace_seconds = 1.0;
  auto client = GrpcCoordinatorClient::Create(channel, "test", &stop, reach);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Retryable((*client)->ReportMetrics(pb::ReportMetricsRequest())));
  EXPECT_LT(Seconds(start), 8.0);
  EXPECT_FALSE((*client)->GaveUp());
}

TEST(GrpcCoordinatorClient, ReadsAnAddressFile) {
  const std::string dir = ::testing::TempDir() + "/address_file_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/addr") << "  node7:20042 \nignored\n";
  auto a = ReadAddressFile(dir + "/addr");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "node7:20042");
  std::ofstream(dir + "/empty") << "\n";
  EXPECT_TRUE(absl::IsInvalidArgument(ReadAddressFile(dir + "/empty").status()));
  EXPECT_TRUE(absl::IsNotFound(ReadAddressFile(dir + "/missing").status()));
}

TEST(JobSession, EachEndOfTrainingIsReportedAsItsReason) {
  FakeCoordinator diverged_fake;
  JobSession diverged(diverged_fake, Options(), "w", "job", 7);
  TrainResult d = Succeeded(9);
  d.outcome = TrainOutcome::kDiverged;
  d.message = "loss is nan";
  diverged.Finish(d);
  EXPECT_EQ(diverged_fake.fail.reason(), pb::FailJobRequest::DIVERGED);
  EXPECT_FALSE(diverged_fake.fail.retryable());

  FakeCoordinator error_fake;
  JobSession error(error_fake, Options(), "w", "job", 7);
  error.OnStep(3);
  error.Finish(absl::InternalError(std::string(100000, 'x')));
  EXPECT_EQ(error_fake.fail.reason(), pb::FailJobRequest::ERROR);
  EXPECT_TRUE(error_fake.fail.retryable());
  EXPECT_EQ(error_fake.fail.step(), 3);
  EXPECT_LT(error_fake.fail.message().size(), 17000u);  // cut, within the coordinator's bound

  FakeCoordinator refused_fake;
  JobSession refused(refused_fake, Options(), "w", "job", 7);
  refused.Refuse(absl::InvalidArgumentError("job file of job: not valid JSON"));
  refused.Finish(Succeeded(1));  // the attempt has ended: nothing more
  EXPECT_THAT(refused_fake.Calls(), ElementsAre("FailJob"));
  EXPECT_EQ(refused_fake.fail.reason(), pb::FailJobRequest::ERROR);
  EXPECT_FALSE(refused_fake.fail.retryable());  // no retry can fix the file
}

TEST(JobSession, TheWatchdogReportsAStalledAttemptOnceAndHandsOver) {
  FakeCoordinator fake;
  std::atomic<int> stalled{0};
  JobSessionOptions o = Options();
  o.stall_seconds = 0.3;
  o.on_stalled = [&] { ++stalled; };
  JobSession session(fake, o, "w", "job", 7);
  session.OnStep(4);
  session.StartHeartbeat(30.0);
  for (int i = 0; i < 100 && stalled == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  session.StopHeartbeat();
  EXPECT_EQ(stalled, 1);
  const auto calls = fake.Calls();
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "FailJobOnce"), 1);
  EXPECT_THAT(fake.fail.message(), HasSubstr("stalled"));
  EXPECT_TRUE(fake.fail.retryable());
  EXPECT_EQ(fake.fail.step(), 4);
}

TEST(JobSession, StepsKeepTheWatchdogQuiet) {
  FakeCoordinator fake;
  std::atomic<int> stalled{0};
  JobSessionOptions o = Options();
  o.stall_seconds = 0.4;
  o.on_stalled = [&] { ++stalled; };
  JobSession session(fake, o, "w", "job", 7);
  session.StartHeartbeat(30.0);
  for (int step = 1; step <= 20; ++step) {  // a step every 50 ms for a second
    session.OnStep(step);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  session.StopHeartbeat();
  EXPECT_EQ(stalled, 0);
  const auto calls = fake.Calls();
  EXPECT_GE(std::count(calls.begin(), calls.end(), "Heartbeat"), 5);  // every stall/4
  EXPECT_GE(fake.last_heartbeat.step(), 10);  // the beats carried the steps as they went
  session.ConfirmLease();
  EXPECT_EQ(fake.last_heartbeat.step(), 20);
}

TEST(JobSession, AReportWaitingForTheCoordinatorIsNoStall) {
  FakeCoordinator fake;
  fake.metrics_delay_seconds = 1.0;  // more than twice the stall timeout
  std::atomic<int> stalled{0};
  JobSessionOptions o = Options();
  o.stall_seconds = 0.4;
  o.on_stalled = [&] { ++stalled; };
  JobSession session(fake, o, "w", "job", 7);
  session.OnStep(1);
  session.StartHeartbeat(30.0);
  session.OnMetrics({{"train_loss", 1, 2.0, 1, 1.0}});
  EXPECT_TRUE(session.Flush());  // blocks for a second, training waits with it
  session.StopHeartbeat();
  EXPECT_EQ(stalled, 0);
  // Each heartbeat waits for the coordinator no longer than the beat period.
  EXPECT_GT(fake.last_wait, 0);
  EXPECT_LE(fake.last_wait, 0.4 / 4.0 + 1e-9);
}

}  // namespace
}  // namespace xmod
