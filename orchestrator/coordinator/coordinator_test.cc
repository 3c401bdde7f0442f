#include "orchestrator/coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "orchestrator/service/client.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("xmod_coordinator_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void RemoveDatabase(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::error_code ignored;
    std::filesystem::remove(path + suffix, ignored);
  }
}

std::string SmokeYaml() {
  std::ifstream in(std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CoordinatorOptions Loopback(const std::string& db) {
  CoordinatorOptions options;
  options.db = db;
  options.server.listen = "127.0.0.1:0";
  return options;
}

// The store stamps the lease with the injected clock, and the dashboard measures
// the sweep's elapsed time on the same clock: two minutes of fake time are two
// minutes on /api/sweeps. The gRPC side serves the same store.
TEST(Coordinator, OneInjectedClockRunsTheStoreTheSchedulerAndTheDashboard) {
  const std::string db = TempPath("clock.db");
  RemoveDatabase(db);
  FakeClock clock;
  CoordinatorOptions options = Loopback(db);
  options.http = "127.0.0.1:0";
  options.clock = &clock;
  auto coordinator = Coordinator::Open(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  Coordinator& c = **coordinator;
  EXPECT_EQ(&c.clock(), &clock);
  EXPECT_EQ(&c.store().clock(), &clock);
  ASSERT_TRUE(c.scheduler().Submit(SmokeYaml(), "smoke.yaml").ok());
  const std::string worker = c.scheduler().RegisterWorker("host", 1, "").value();
  ASSERT_TRUE(c.scheduler().Lease(worker)->grant.has_value());
  clock.Advance(120.0);
  ASSERT_TRUE(c.Serve().ok());
  ASSERT_NE(c.dashboard(), nullptr);

  httplib::Client web("127.0.0.1", c.dashboard()->port());
  auto res = web.Get("/api/sweeps");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const nlohmann::json sweeps = nlohmann::json::parse(res->body);
  ASSERT_EQ(sweeps.size(), 1u);
  EXPECT_DOUBLE_EQ(sweeps[0]["elapsed_s"].get<double>(), 120.0);

  auto remote = RemoteCoordinator::Connect(c.server().address(), "", "");
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto status = (*remote)->Status("smoke");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->front().states.total, 8);
  coordinator->reset();
  RemoveDatabase(db);
}

// A second coordinator on a taken port does not start; the database it created
// for the attempt goes again, while one that was there before is kept.
TEST(Coordinator, AGrpcServerThatCannotStartLeavesNoNewDatabaseBehind) {
  const std::string first_db = TempPath("first.db"), second_db = TempPath("second.db");
  RemoveDatabase(first_db);
  RemoveDatabase(second_db);
  auto first = Coordinator::Open(Loopback(first_db));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Serve().ok());
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->server().port());

  CoordinatorOptions options = Loopback(second_db);
  options.server.listen = taken;
  auto second = Coordinator::Open(options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(std::filesystem::exists(second_db));
  const absl::Status refused = (*second)->Serve();
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(std::filesystem::exists(second_db));
  second->reset();

  // The file exists now: a failed start leaves it as it was.
  Coordinator::Open(Loopback(second_db)).value().reset();
  ASSERT_TRUE(std::filesystem::exists(second_db));
  auto third = Coordinator::Open(options);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE((*third)->Serve().ok());
  third->reset();
  EXPECT_TRUE(std::filesystem::exists(second_db));
  first->reset();
  RemoveDatabase(first_db);
  RemoveDatabase(second_db);
}

// A dashboard that may not listen (off loopback without a token) fails the start
// after the gRPC server came up: the server is stopped, the database kept.
TEST(Coordinator, ADashboardThatCannotStartStopsTheStartAndKeepsTheDatabase) {
  const std::string db = TempPath("dashboard.db");
  RemoveDatabase(db);
  CoordinatorOptions options = Loopback(db);
  options.http = "10.1.2.3:0";
  auto coordinator = Coordinator::Open(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const absl::Status refused = (*coordinator)->Serve();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("operator token"));
  EXPECT_EQ((*coordinator)->dashboard(), nullptr);
  coordinator->reset();
  EXPECT_TRUE(std::filesystem::exists(db));
  RemoveDatabase(db);
}

}  // namespace
}  // namespace xmod
