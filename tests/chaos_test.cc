// Chaos: a seeded random schedule of faults over a real small sweep (a
// coordinator on loopback and two groups of two ranks), then checks that the
// faults cost nothing they should not have:
//   - every job succeeded, and its curves hold each step once and are bit for
//     bit those of the same job trained straight through on two ranks (CPU;
//     every metric but the measured tokens_per_s);
//   - an attempt ends as anything but succeeded only in a group that a worker
//     fault hit (kill -9 of the group or of one rank, SIGSTOP past the lease),
//     at most once per such fault, or as preempted in a group that was signalled
//     (or, not counted, in a faulted group whose lease outlived a coordinator
//     restart); coordinator restarts cost no attempt;
//   - the database passes PRAGMA integrity_check.
// The schedule is printed first; XMOD_CHAOS_SEED=N reruns seed N (default 1).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/cluster.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

using testing::CommandResult;

enum class FaultKind { kKillGroup, kKillRank, kStopGroup, kPreempt, kKillCoordinator };
constexpr int kFaultKinds = 5;

const char* Name(FaultKind k) {
  switch (k) {
    case FaultKind::kKillGroup:
      return "kill -9 group";
    case FaultKind::kKillRank:
      return "kill -9 rank";
    case FaultKind::kStopGroup:
      return "SIGSTOP group past its lease, then SIGCONT";
    case FaultKind::kPreempt:
      return "SIGUSR2 to the group's ranks (preemption)";
    case FaultKind::kKillCoordinator:
      return "kill -9 coordinator, restart after 2 TTL";
  }
  return "?";
}

struct Fault {
  FaultKind kind;
  double wait_seconds;  // after the previous fault
  int group;            // 0 or 1
  int rank;             // for kKillRank
};

// Every kind once in a seeded order, then three more drawn at random. Only the
// generator's raw output is used (not std's distributions, whose mapping may
// differ between standard libraries), so a seed means the same schedule anywhere.
std::vector<Fault> MakeSchedule(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return static_cast<int>(rng() % n); };
  std::vector<FaultKind> kinds;
  for (int k = 0; k < kFaultKinds; ++k) kinds.push_back(static_cast<FaultKind>(k));
  for (int i = kFaultKinds - 1; i > 0; --i) std::swap(kinds[i], kinds[below(i + 1)]);
  for (int i = 0; i < 3; ++i) kinds.push_back(static_cast<FaultKind>(below(kFaultKinds)));
  std::vector<Fault> schedule;
  for (FaultKind k : kinds) {
    Fault f;
    f.kind = k;
    f.wait_seconds = 1.5 + below(21) / 10.0;
    f.group = below(2);
    f.rank = below(2);
    schedule.push_back(f);
  }
  return schedule;
}

uint64_t Seed() {
  const char* text = std::getenv("XMOD_CHAOS_SEED");
  return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 10) : 1;
}

class Chaos : public testing::ClusterTest {};

TEST_F(Chaos, ASeededFaultScheduleCostsNoStepNoBitAndNoUncountedAttempt) {
  const uint64_t seed = Seed();
  const std::vector<Fault> schedule = MakeSchedule(seed);
  std::ostringstream plan;
  plan << "chaos seed " << seed << " (rerun: XMOD_CHAOS_SEED=" << seed
       << " ctest --test-dir build -R Chaos --output-on-failure)\n";
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Fault& f = schedule[i];
    plan << "  " << i + 1 << ". after " << f.wait_seconds << " s: " << Name(f.kind);
    if (f.kind != FaultKind::kKillCoordinator) plan << ", group slot " << f.group;
    if (f.kind == FaultKind::kKillRank) plan << ", rank " << f.rank;
    plan << "\n";
  }
  std::cout << plan.str() << std::flush;

  // The reference: every job trained straight through by two ranks.
  auto jobs = nlohmann::json::parse(
      Command(XMOD_BIN, {"expand", Fixture("chaos.yaml"), "--format", "json"}).out);
  ASSERT_EQ(jobs.size(), 6u);
  std::map<std::string, std::map<std::pair<std::string, int64_t>, double>> reference;
  for (const auto& job : jobs) {
    const std::string id = job["id"];
    std::ofstream(Path(id + ".json")) << job.dump();
    CommandResult r = Command(
        MPIEXEC, {"-np", "2", "--allow-run-as-root", "--oversubscribe", XMOD_TRAIN_BIN, "--job",
                  Path(id + ".json"), "--run-dir", Path("ref"), "--threads", "1", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    reference[id] = ReadMetricsLog(Path("ref") + "/" + id + "/metrics.jsonl");
    ASSERT_FALSE(reference[id].empty()) << id;
  }

  const double ttl = 2.0;
  const int port = testing::FreePort();
  pid_t serve = Serve(port, ttl);
  Submit(port, Fixture("chaos.yaml"));
  std::array<pid_t, 2> groups{};
  std::array<std::string, 2> names;
  int spawned = 0;
  auto spawn = [&](int slot) {
    names[slot] = "g" + std::to_string(++spawned);
    groups[slot] = Group(port, 2, names[slot]);
  };
  spawn(0);
  spawn(1);
  std::map<std::string, int> faulted;  // worker faults per group: each may lose one attempt
  std::set<std::string> signalled;     // groups told to stop: their attempt ends preempted
  auto sweep_done = [&] {
    return Count("SELECT COUNT(*) FROM jobs WHERE status IN ('pending', 'leased', 'running')") == 0;
  };
  auto wait_or_kill = [&](int slot, double seconds) {
    int code = testing::WaitExit(groups[slot], seconds);
    if (code == -1) {
      SignalTree(groups[slot], SIGKILL);
      code = testing::WaitExit(groups[slot], 10);
    }
    return code;
  };

  for (size_t i = 0; i < schedule.size(); ++i) {
    const Fault& f = schedule[i];
    std::this_thread::sleep_for(std::chrono::duration<double>(f.wait_seconds));
    if (sweep_done()) {
      std::cout << "  fault " << i + 1 << " not applied: the sweep has finished\n";
      continue;
    }
    // A group may only have left by itself once the sweep is done.
    for (int slot = 0; slot < 2; ++slot) {
      int status = 0;
      if (::waitpid(groups[slot], &status, WNOHANG) == groups[slot]) {
        ADD_FAILURE() << names[slot] << " ended by itself mid-sweep (status " << status << ")\n"
                      << testing::Slurp(Path(names[slot] + ".log"));
        spawn(slot);
      }
    }
    const int slot = f.group;
    const std::string target = names[slot];
    switch (f.kind) {
      case FaultKind::kKillGroup:
        SignalTree(groups[slot], SIGKILL);
        testing::WaitExit(groups[slot], 30);
        ++faulted[target];
        spawn(slot);
        break;
      case FaultKind::kKillRank: {
        const pid_t rank = testing::RankPid(groups[slot], f.rank);
        if (rank > 0) {
          ::kill(rank, SIGKILL);
        } else {  // its ranks are not started yet: the whole group instead
          std::cout << "  " << target << " has no rank " << f.rank << " yet; killing the group\n";
          SignalTree(groups[slot], SIGKILL);
        }
        wait_or_kill(slot, 60);  // mpirun ends the group's other rank
        ++faulted[target];
        spawn(slot);
        break;
      }
      case FaultKind::kStopGroup:
        SignalTree(groups[slot], SIGSTOP);
        std::this_thread::sleep_for(std::chrono::duration<double>(2.5 * ttl));
        SignalTree(groups[slot], SIGCONT);  // a zombie now: it must write nothing and go on
        ++faulted[target];
        break;
      case FaultKind::kPreempt: {
        const std::vector<pid_t> tree = ProcessTree(groups[slot]);
        for (size_t p = 1; p < tree.size(); ++p) ::kill(tree[p], SIGUSR2);
        EXPECT_EQ(wait_or_kill(slot, 60), 0) << testing::Slurp(Path(target + ".log"));
        signalled.insert(target);
        spawn(slot);
        break;
      }
      case FaultKind::kKillCoordinator:
        SignalTree(serve, SIGKILL);
        testing::WaitExit(serve, 10);
        std::this_thread::sleep_for(std::chrono::duration<double>(2 * ttl));
        serve = Serve(port, ttl);
        break;
    }
    std::cout << "  fault " << i + 1 << " applied"
              << (f.kind == FaultKind::kKillCoordinator ? "" : " to " + target) << "\n"
              << std::flush;
  }

  // The rest of the sweep, undisturbed.
  for (int slot = 0; slot < 2; ++slot) {
    EXPECT_EQ(testing::WaitExit(groups[slot], 300), 0)
        << testing::Slurp(Path(names[slot] + ".log"));
  }

  auto integrity = Rows("PRAGMA integrity_check");
  ASSERT_EQ(integrity.size(), 1u);
  EXPECT_EQ(std::get<std::string>(integrity[0][0]), "ok");
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 6);
  ExpectCompleteCurves();
  for (const auto& [id, curve] : reference) {
    const auto stored = StoredMetrics(id);
    EXPECT_EQ(stored.size(), curve.size()) << id;
    for (const auto& [key, value] : curve) {
      auto it = stored.find(key);
      if (it == stored.end()) {
        ADD_FAILURE() << id << ": " << key.first << " at step " << key.second << " is missing";
      } else if (key.first != "tokens_per_s" && it->second != value) {
        // Bit for bit, except the one measured metric (throughput is wall-clock).
        ADD_FAILURE() << id << ": " << key.first << " at step " << key.second << " is "
                      << it->second << ", straight through " << value;
      }
    }
  }

  // Every attempt that did not succeed is explained by a fault of its group.
  std::map<std::string, int> lost_per_group;
  int64_t lost = 0;
  for (const auto& row :
       Rows("SELECT job_id, attempt, worker_id, status, COALESCE(reason, '') FROM attempts "
            "WHERE status <> 'succeeded'")) {
    const std::string worker = std::get<std::string>(row[2]);
    const std::string group = worker.substr(0, worker.find('-'));
    const std::string status = std::get<std::string>(row[3]);
    std::ostringstream what;
    what << std::get<std::string>(row[0]) << " attempt " << std::get<int64_t>(row[1]) << " in "
         << group << " ended " << status << " (" << std::get<std::string>(row[4]) << ")";
    const bool lost_in_restart =
        std::get<std::string>(row[4]).rfind("lease held across a coordinator restart", 0) == 0;
    if (status == "preempted" && lost_in_restart) {
      // A group that a worker fault ended while the coordinator was down: the
      // restarted coordinator cannot tell it from a group that left during the
      // outage, and does not count it (docs/protocol.md, row 10a).
      EXPECT_TRUE(faulted.count(group)) << what.str() << ": no worker fault hit that group";
    } else if (status == "preempted") {
      EXPECT_TRUE(signalled.count(group)) << what.str() << ": that group was not signalled";
    } else {
      ++lost;
      EXPECT_TRUE(faulted.count(group)) << what.str() << ": no worker fault hit that group";
      EXPECT_LE(++lost_per_group[group], faulted[group])
          << what.str() << ": more lost attempts than faults in that group";
    }
    std::cout << "  " << what.str() << "\n";
  }
  EXPECT_EQ(Count("SELECT SUM(failures) FROM jobs"), lost);  // preemptions do not count
  std::cout << "  " << faulted.size() << " groups hit by worker faults, " << signalled.size()
            << " preempted; " << lost << " attempts lost\n";
}

}  // namespace
}  // namespace xmod
