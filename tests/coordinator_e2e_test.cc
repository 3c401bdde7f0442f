// The distributed system end to end, with real processes on loopback: `xmod serve`
// over a SQLite file, worker groups started with `mpirun`, and failures made with
// kill -9, SIGSTOP and SIGCONT. Every wait is bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "orchestrator/launch/local_run.h"
#include "orchestrator/store/sqlite_store.h"
#include "tests/cluster.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

using testing::CommandResult;
using testing::RankPid;

class CoordinatorE2e : public testing::ClusterTest {};

TEST_F(CoordinatorE2e, TwoGroupsOfTwoRanksCompleteTheSmokeSweep) {
  const int port = testing::FreePort();
  Serve(port, 10);
  Submit(port, std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  const pid_t a = Group(port, 2, "a");
  const pid_t b = Group(port, 2, "b");
  EXPECT_EQ(testing::WaitExit(a, 240), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(testing::WaitExit(b, 240), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 8);
  EXPECT_EQ(Count("SELECT COUNT(DISTINCT worker_id) FROM attempts"), 2);  // both groups worked
  ExpectCompleteCurves();
}

TEST_F(CoordinatorE2e, AGroupKilledMidJobIsResumedFromItsCheckpointByAnotherGroup) {
  // The reference: the same job trained straight through with the same two ranks.
  auto jobs = nlohmann::json::parse(
      Command(XMOD_BIN, {"expand", Fixture("long.yaml"), "--format", "json"}).out);
  const std::string id = jobs[0]["id"];
  std::ofstream(Path("job.json")) << jobs[0].dump();
  CommandResult ref = Command(
      MPIEXEC, {"-np", "2", "--allow-run-as-root", "--oversubscribe", XMOD_TRAIN_BIN, "--job",
                Path("job.json"), "--run-dir", Path("ref"), "--threads", "1", "--quiet"});
  ASSERT_EQ(ref.code, 0) << ref.err;
  std::map<int64_t, double> reference;
  std::ifstream in(Path("ref") + "/" + id + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["name"] == "train_loss") reference[j["step"]] = j["value"];
  }
  ASSERT_EQ(reference.size(), 120u);

  const int port = testing::FreePort();
  Serve(port, 2);
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 2, "a");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 30") > 0; }, 120))
      << testing::Slurp(Path("a.log"));
  SignalTree(a, SIGKILL);  // mpirun and both ranks, mid-job
  testing::WaitExit(a, 10);
  const pid_t b = Group(port, 2, "b");
  ASSERT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  ASSERT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  EXPECT_GE(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2"), 30);
  ExpectCompleteCurves();
  // The curve stitched from two groups is the uninterrupted one, bit for bit.
  for (const auto& row : Rows("SELECT step, value FROM metrics WHERE name = 'train_loss' "
                              "AND job_id = '" +
                              id + "' ORDER BY step")) {
    const int64_t step = std::get<int64_t>(row[0]);
    EXPECT_EQ(std::get<double>(row[1]), reference.at(step)) << "step " << step;
  }
}

TEST_F(CoordinatorE2e, TheCoordinatorKilledMidSweepAndRestartedLosesNothing) {
  const int port = testing::FreePort();
  pid_t serve = Serve(port, 5);
  Submit(port, Fixture("six.yaml"));
  const pid_t a = Group(port, 1, "a");
  const pid_t b = Group(port, 1, "b");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'") >= 2; }, 120));
  SignalTree(serve, SIGKILL);
  testing::WaitExit(serve, 10);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  serve = Serve(port, 5);  // same file, same address; the groups reconnect by themselves
  EXPECT_EQ(testing::WaitExit(a, 240), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(testing::WaitExit(b, 240), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 6);
  ExpectCompleteCurves();
}

// With the shortest lease the coordinator grants, it is killed three times mid
// sweep and stays away for longer than a lease each time; a group is preempted
// while it is away. The groups reconnect within the grace the restarted
// coordinator grants, so no attempt ends as anything but succeeded or (the
// signalled one) preempted, and no job counts a failure.
TEST_F(CoordinatorE2e, RepeatedCoordinatorRestartsUnderTheShortestTtlCostNoAttempt) {
  const int port = testing::FreePort();
  const double ttl = 1.0;  // kMinLeaseTtlSeconds
  pid_t serve = Serve(port, ttl);
  Submit(port, Fixture("six.yaml"));
  const pid_t a = Group(port, 1, "a");
  const pid_t b = Group(port, 1, "b");
  int64_t rows = 0;
  for (int outage = 1; outage <= 3; ++outage) {
    // Some training between outages, and on the last one b in the middle of a job.
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          return Count("SELECT COUNT(*) FROM metrics") >= rows + 40 &&
                 (outage < 3 || Count("SELECT COUNT(*) FROM jobs WHERE status = 'running' AND "
                                      "worker_id LIKE 'b-%' AND last_step >= 5") == 1);
        },
        120))
        << "outage " << outage << "\n"
        << testing::Slurp(Path("b.log"));
    rows = Count("SELECT COUNT(*) FROM metrics");
    SignalTree(serve, SIGKILL);
    testing::WaitExit(serve, 10);
    if (outage == 3) {  // preempted while the coordinator is away, as Slurm signals
      const std::vector<pid_t> tree = ProcessTree(b);
      for (size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGUSR2);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(2.5 * ttl));
    serve = Serve(port, ttl);
  }
  EXPECT_EQ(testing::WaitExit(b, 120), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(testing::WaitExit(a, 240), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 6);
  for (const auto& row : Rows("SELECT job_id, attempt, status, reason FROM attempts "
                              "WHERE status NOT IN ('succeeded', 'preempted')")) {
    ADD_FAILURE() << std::get<std::string>(row[0]) << " attempt " << std::get<int64_t>(row[1])
                  << " ended " << std::get<std::string>(row[2]) << ": "
                  << (std::holds_alternative<std::string>(row[3]) ? std::get<std::string>(row[3])
                                                                  : "");
  }
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts WHERE status = 'preempted'"), 1);
  EXPECT_EQ(Count("SELECT SUM(failures) FROM jobs"), 0);
  ExpectCompleteCurves();
}

TEST_F(CoordinatorE2e, AZombieGroupWhoseLeaseExpiredCanWriteNothing) {
  const int port = testing::FreePort();
  Serve(port, 2);
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 1, "a");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 20") > 0; }, 120));
  SignalTree(a, SIGSTOP);  // frozen with the lease: it expires, the job moves on
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM jobs WHERE status = 'pending'") == 1; }, 30));
  const pid_t b = Group(port, 1, "b");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM attempts WHERE attempt = 2") == 1; }, 30));
  SignalTree(a, SIGCONT);  // the zombie wakes up mid-step and tries to go on
  EXPECT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(testing::WaitExit(a, 60), 0) << testing::Slurp(Path("a.log"));
  EXPECT_THAT(testing::Slurp(Path("a.log")), ::testing::HasSubstr("no longer held by this group"));
  const int64_t resumed = Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2");
  // Past the resume point, every row is the new attempt's.
  EXPECT_EQ(
      Count("SELECT COUNT(*) FROM metrics WHERE attempt = 1 AND step > " + std::to_string(resumed)),
      0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM checkpoints WHERE attempt = 1 AND step > " +
                  std::to_string(resumed)),
            0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  ExpectCompleteCurves();
}

// Issue 30, item 6, with real processes: group a freezes (SIGSTOP, injected once
// the files of its last step's checkpoint are written, before they are published);
// its lease expires and group b resumes the job, writes and publishes the same step
// and completes the job. Woken, a finds its lease gone: it removes its own folder,
// drops the job and exits like any group that ran out of work, instead of ending
// through MPI_Abort; the folder of that step is b's, and nothing of a's is left
// (b's pruning removed a's temporary folder as an ended attempt's leftover).
TEST_F(CoordinatorE2e, AGroupFrozenMidCheckpointWakesAfterItsLeaseMovedAndDropsTheJob) {
  const int port = testing::FreePort();
  Serve(port, 2);
  Submit(port, Fixture("long.yaml"));
  const auto ids = Rows("SELECT job_id FROM jobs");
  ASSERT_EQ(ids.size(), 1u);
  const std::string job = std::get<std::string>(ids[0][0]);
  const std::filesystem::path checkpoints =
      std::filesystem::path(Path("runs")) / job / "checkpoints";
  const int64_t steps = Count("SELECT steps FROM jobs");
  ASSERT_EQ(steps, 120);
  ::setenv("XMOD_FAULT_STOP_AT_CHECKPOINT", "120", 1);
  const pid_t a = Group(port, 1, "a");
  ::unsetenv("XMOD_FAULT_STOP_AT_CHECKPOINT");
  const auto tmp_of = [&](int64_t token) {
    return checkpoints / ("step_00000120.tmp-" + std::to_string(token));
  };
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step = 110") == 1; }, 120))
      << testing::Slurp(Path("a.log"));
  const int64_t token_a = Count("SELECT fencing_token FROM attempts WHERE attempt = 1");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return std::filesystem::exists(tmp_of(token_a) / "meta.json"); }, 60))
      << testing::Slurp(Path("a.log"));
  // Frozen mid-write: the lease runs out and the job goes to b.
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM jobs WHERE status = 'pending'") == 1; }, 30));
  const pid_t b = Group(port, 1, "b");
  EXPECT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  ASSERT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  const int64_t token_b = Count("SELECT fencing_token FROM attempts WHERE attempt = 2");
  ASSERT_GT(token_b, token_a);
  // b's pruning, after the coordinator recorded its checkpoint, removed the
  // leftovers of attempts with lower tokens: a's temporary folder among them.
  EXPECT_FALSE(std::filesystem::exists(tmp_of(token_a)));
  SignalTree(a, SIGCONT);
  EXPECT_EQ(testing::WaitExit(a, 60), 0) << testing::Slurp(Path("a.log"));
  EXPECT_THAT(testing::Slurp(Path("a.log")), ::testing::HasSubstr("not published"));
  EXPECT_FALSE(std::filesystem::exists(tmp_of(token_a)));
  std::ifstream meta(checkpoints / "step_00000120" / "meta.json");
  EXPECT_EQ(nlohmann::json::parse(meta).at("fencing_token").get<int64_t>(), token_b);
  EXPECT_EQ(Count("SELECT attempt FROM checkpoints WHERE step = 120"), 2);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts"), 2);
  ExpectCompleteCurves();
}

TEST_F(CoordinatorE2e, AGroupWithAStoppedRankIsEndedByItsWatchdogAndTheJobMovesOn) {
  const int port = testing::FreePort();
  Serve(port, 30);  // a long lease: only the watchdog can free the job quickly
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 2, "a", {"--stall-timeout", "3"});
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 20") > 0; }, 120))
      << testing::Slurp(Path("a.log"));
  const pid_t rank1 = RankPid(a, 1);
  ASSERT_GT(rank1, 0);
  ::kill(rank1, SIGSTOP);  // rank 0 now waits in the next all-reduce, heartbeating
  // The watchdog reports the attempt failed and ends the group, well before the
  // 30 s lease would have run out.
  const auto stopped = std::chrono::steady_clock::now();
  EXPECT_NE(testing::WaitExit(a, 60), 0);
  EXPECT_THAT(testing::Slurp(Path("a.log")), ::testing::HasSubstr("no training step for 3 s"));
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM jobs WHERE status = 'pending'") == 1; }, 10));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count(), 25);
  auto reason = Rows("SELECT reason FROM attempts WHERE attempt = 1");
  ASSERT_EQ(reason.size(), 1u);
  EXPECT_THAT(std::get<std::string>(reason[0][0]), ::testing::HasSubstr("stalled"));
  ::kill(rank1, SIGKILL);  // if mpirun left it stopped
  const pid_t b = Group(port, 2, "b");
  EXPECT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  EXPECT_GE(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2"), 20);
  ExpectCompleteCurves();
}

TEST_F(CoordinatorE2e, SigUsr2CheckpointsReportsPreemptedAndUsesNoAttempt) {
  const int port = testing::FreePort();
  Serve(port, 10);
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 2, "a");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 10") > 0; }, 120));
  // As Slurm's --signal does: to every rank (mpirun's children), not to mpirun.
  const std::vector<pid_t> tree = ProcessTree(a);
  for (size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGUSR2);
  EXPECT_EQ(testing::WaitExit(a, 60), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts WHERE status = 'preempted'"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND failures = 0"), 1);
  // The checkpoint taken at the stop is the resume point of the next group.
  const int64_t stopped_at = Count("SELECT MAX(step) FROM checkpoints");
  // The group's log says what happened, with the step.
  EXPECT_THAT(testing::Slurp(Path("a.log")),
              ::testing::HasSubstr("preempted at step " + std::to_string(stopped_at)));
  const pid_t b = Group(port, 2, "b");
  EXPECT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2"), stopped_at);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  ExpectCompleteCurves();
}

// Elastic resume (issue 14): a job preempted on a group of 2 ranks resumes on a
// group of 1, is preempted again and finishes on a group of 2. Each lease says
// the rank count that wrote its checkpoint and the group logs the change; the
// stored curve is one curve, equal to the job trained alone on one rank up to
// the order of floating-point reductions.
TEST_F(CoordinatorE2e, AJobResumesOnADifferentRankCountTwoToOneToTwo) {
  // A dense job of 480 steps: without routing, no token near a top-k threshold
  // can flip, so the rounding of the reduction order stays small.
  std::ofstream(Path("elastic.yaml"))
      << "name: elastic\n"
         "data: {synthetic: true, seed: 11, vocab_size: 64}\n"
         "family: dense\n"
         "scales: {tiny: {d_model: 32, n_heads: 4, n_layers: 4}}\n"
         "grid: {scale: [tiny], context: [32]}\n"
         "budget: {tokens: 983040}\n"
         "train: {batch_tokens: 2048, lr: 1.0e-2, warmup_steps: 5, eval_interval: 20,\n"
         "        eval_tokens: 1024, checkpoint_interval: 10}\n"
         "design: {laws: []}\n";
  const int port = testing::FreePort();
  Serve(port, 10);
  Submit(port, Path("elastic.yaml"));
  const auto preempt_after = [&](pid_t group, const std::string& name, int64_t step) {
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= " + std::to_string(step)) >
                 0;
        },
        180))
        << testing::Slurp(Path(name + ".log"));
    const std::vector<pid_t> tree = ProcessTree(group);
    for (size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGUSR2);
    ASSERT_EQ(testing::WaitExit(group, 60), 0) << testing::Slurp(Path(name + ".log"));
  };
  preempt_after(Group(port, 2, "a"), "a", 20);
  const int64_t first_stop = Count("SELECT MAX(step) FROM checkpoints");
  ASSERT_LT(first_stop, 480);
  preempt_after(Group(port, 1, "b"), "b", first_stop + 20);
  const int64_t second_stop = Count("SELECT MAX(step) FROM checkpoints");
  ASSERT_LT(second_stop, 480);
  const pid_t c = Group(port, 2, "c");
  ASSERT_EQ(testing::WaitExit(c, 300), 0) << testing::Slurp(Path("c.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND failures = 0"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts WHERE status = 'preempted'"), 2);
  EXPECT_EQ(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2"), first_stop);
  EXPECT_EQ(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 3"), second_stop);
  EXPECT_THAT(
      testing::Slurp(Path("b.log")),
      ::testing::HasSubstr("elastic resume: its checkpoint at step " + std::to_string(first_stop) +
                           " was written by a group of 2 rank(s); it continues on 1"));
  EXPECT_THAT(
      testing::Slurp(Path("c.log")),
      ::testing::HasSubstr("elastic resume: its checkpoint at step " + std::to_string(second_stop) +
                           " was written by a group of 1 rank(s); it continues on 2"));
  ExpectCompleteCurves();

  // The reference: the same job file trained without a stop on one rank.
  const auto job = Rows("SELECT job_id, config_json FROM jobs");
  ASSERT_EQ(job.size(), 1u);
  const std::string id = std::get<std::string>(job[0][0]);
  std::ofstream(Path("job.json")) << std::get<std::string>(job[0][1]);
  CommandResult r = Command(XMOD_TRAIN_BIN, {"--job", Path("job.json"), "--run-dir",
                                             Path("reference"), "--threads", "1", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto reference = ReadMetricsLog(Path("reference/" + id + "/metrics.jsonl"));
  const auto stored = StoredMetrics(id);
  // Only the rounding of the reduction order differs (measured: median 5e-8, largest
  // 2.5e-7 relative): every loss within 1e-5, the median within 1e-6. A resume that
  // lost or repeated a step, or restarted the data, is off by the batch-to-batch
  // spread of several percent.
  std::vector<double> relative;
  for (const auto& [key, value] : reference) {
    if (key.first != "train_loss" && key.first != "val_loss") continue;
    ASSERT_EQ(stored.count(key), 1u) << key.first << " step " << key.second;
    relative.push_back(std::abs(stored.at(key) - value) / value);
    EXPECT_NEAR(stored.at(key), value, 1e-5 * value) << key.first << " step " << key.second;
  }
  ASSERT_GE(relative.size(), 480u);
  std::sort(relative.begin(), relative.end());
  const double median = relative[relative.size() / 2];
  EXPECT_LT(median, 2e-4);
  std::printf(
      "elastic 2 -> 1 -> 2 ranks vs one rank over %zu losses: median relative "
      "difference %.2e, largest %.2e\n",
      relative.size(), median, relative.back());
}

// Packing (issue 14): one launch of 4 ranks with --pack 2 is two worker groups of
// 2 ranks on disjoint ranks (MPI_Comm_split), each leasing its own jobs, so two
// jobs train at the same time; each curve is exactly the one a 2-rank launch of
// that job alone trains.
TEST_F(CoordinatorE2e, APackedLaunchOfFourRanksTrainsTwoTwoRankJobsAtOnce) {
  const int port = testing::FreePort();
  Serve(port, 10);
  Submit(port, std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml");
  const pid_t g = Group(port, 4, "p", {"--pack", "2"});
  ASSERT_EQ(testing::WaitExit(g, 300), 0) << testing::Slurp(Path("p.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 8);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM workers WHERE ranks = 2 AND (worker_id LIKE 'p-g0-%' "
                  "OR worker_id LIKE 'p-g1-%')"),
            2);
  EXPECT_EQ(Count("SELECT COUNT(DISTINCT worker_id) FROM attempts"), 2);
  // Two attempts of different sub-groups overlapped in time.
  EXPECT_GT(Count("SELECT COUNT(*) FROM attempts a JOIN attempts b ON a.worker_id < b.worker_id "
                  "AND a.started_at < b.ended_at AND b.started_at < a.ended_at"),
            0);
  ExpectCompleteCurves();
  // One job of each sub-group, trained alone by a 2-rank launch: the same curve, bit for bit.
  for (const char* sub : {"p-g0-%", "p-g1-%"}) {
    const auto job = Rows(std::string("SELECT j.job_id, j.config_json FROM jobs j JOIN attempts a "
                                      "ON a.job_id = j.job_id WHERE a.worker_id LIKE '") +
                          sub + "' ORDER BY j.job_id LIMIT 1");
    ASSERT_EQ(job.size(), 1u) << sub;
    const std::string id = std::get<std::string>(job[0][0]);
    std::ofstream(Path(id + ".json")) << std::get<std::string>(job[0][1]);
    CommandResult r = Command(
        MPIEXEC, {"-np", "2", "--allow-run-as-root", "--oversubscribe", XMOD_TRAIN_BIN, "--job",
                  Path(id + ".json"), "--run-dir", Path("alone"), "--threads", "1", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto alone = ReadMetricsLog(Path("alone/" + id + "/metrics.jsonl"));
    const auto stored = StoredMetrics(id);
    int compared = 0;
    for (const auto& [key, value] : alone) {
      if (key.first != "train_loss" && key.first != "val_loss") continue;
      ASSERT_EQ(stored.count(key), 1u) << id << " " << key.first << " step " << key.second;
      EXPECT_EQ(stored.at(key), value) << id << " " << key.first << " step " << key.second;
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
  // A pack that does not divide the launch is refused before anything registers.
  const pid_t bad = Group(port, 3, "bad", {"--pack", "2"});
  EXPECT_NE(testing::WaitExit(bad, 60), 0);
  EXPECT_THAT(testing::Slurp(Path("bad.log")),
              ::testing::HasSubstr("--pack 2 does not divide the 3 ranks"));
}

TEST_F(CoordinatorE2e, ACancelledJobStopsAtTheNextHeartbeat) {
  const int port = testing::FreePort();
  Serve(port, 1);  // heartbeats every third of a second
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 1, "a");
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM jobs WHERE status = 'running'") == 1; }, 60));
  CommandResult r =
      Command(XMOD_BIN, {"cancel", "long", "--coordinator", "127.0.0.1:" + std::to_string(port)});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("1 jobs cancelled"));
  // The group stops the job and, with nothing left to do, leaves.
  EXPECT_EQ(testing::WaitExit(a, 60), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'cancelled'"), 1);
  EXPECT_LT(Count("SELECT COALESCE(MAX(step), 0) FROM metrics"), 120);
}

// A lease whose job file is malformed (cut, mistyped, not JSON) ends that attempt
// as a failure no retry can fix, with the reader's message; rank 0 lives on, the
// other rank keeps waiting for a command, and the group trains the next job.
TEST_F(CoordinatorE2e, AMalformedJobFileFailsItsAttemptAndTheGroupGoesOn) {
  CommandResult submitted = Command(
      XMOD_BIN,
      {"submit", std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml", "--db", Path("x.db")});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(Path("x.db").c_str(), &db), SQLITE_OK);
    // Every job but the cheapest gets a broken file, four kinds in turn.
    const char* sql =
        "UPDATE jobs SET config_json = CASE (rowid % 4) "
        "WHEN 0 THEN substr(config_json, 1, 40) "
        "WHEN 1 THEN replace(config_json, '\"steps\":', '\"steps\":\"many\",\"x\":') "
        "WHEN 2 THEN '[1, 2]' ELSE 'not json at all' END "
        "WHERE job_id <> (SELECT job_id FROM jobs ORDER BY train_flops, job_id LIMIT 1)";
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &error), SQLITE_OK) << error;
    EXPECT_EQ(sqlite3_changes(db), 7);
    sqlite3_close(db);
  }
  const int port = testing::FreePort();
  Serve(port, 10);
  const pid_t a = Group(port, 2, "a");
  EXPECT_EQ(testing::WaitExit(a, 180), 0) << testing::Slurp(Path("a.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'failed' AND attempt = 1 AND "
                  "status_reason LIKE '%job file of %'"),
            7)
      << testing::Slurp(Path("a.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts WHERE status = 'failed'"), 7);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM metrics m JOIN jobs j ON j.job_id = m.job_id WHERE "
                  "j.status = 'succeeded' AND m.name = 'train_loss'"),
            Count("SELECT steps FROM jobs WHERE status = 'succeeded'"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM metrics m JOIN jobs j ON j.job_id = m.job_id WHERE "
                  "j.status = 'failed'"),
            0);
}

TEST_F(CoordinatorE2e, XmodRunTrainsTheSmokeSweepAndContinuesWhereItStopped) {
  CommandResult r =
      Command(XMOD_BIN, {"run", std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml", "--db",
                         Path("x.db"), "--groups", "2", "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("8 succeeded, 0 failed or cancelled, 0 unfinished"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("final_val_loss"));
  ExpectCompleteCurves();
  // Again on the same file: nothing left to train, the results come back at once.
  r = Command(XMOD_BIN, {"run", std::string(XMOD_SOURCE_DIR) + "/sweeps/smoke.yaml", "--db",
                         Path("x.db"), "--run-dir", Path("runs")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("0 new"));
  EXPECT_EQ(Count("SELECT MAX(attempt) FROM jobs"), 1);
  // Provenance (issue 35): every attempt kept the build its group reported, the
  // same commit `xmod --version` names; `xmod results` shows it per job; `xmod
  // status` warns once the sweep's jobs come from two builds.
  r = Command(XMOD_BIN, {"--version"});
  ASSERT_EQ(r.code, 0) << r.err;
  // 12 hex digits (with -dirty), or "unknown" for a build outside a git checkout
  // (the Debian 13 leg's tree).
  const size_t at = r.out.find("(commit ") + 8;
  const std::string commit = r.out.substr(at, r.out.find(',', at) - at);
  EXPECT_EQ(
      Count("SELECT COUNT(*) FROM attempts WHERE json_extract(build, '$.commit') = '" + commit +
            "' AND json_extract(build, '$.libtorch') <> '' AND "
            "json_extract(build, '$.device') <> '' AND host <> ''"),
      8);
  r = Command(XMOD_BIN, {"results", "smoke", "--db", Path("x.db"), "--format", "csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out.substr(0, r.out.find('\n')), ::testing::EndsWith(",commit"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("," + commit));
  r = Command(XMOD_BIN, {"status", "smoke", "--db", Path("x.db")});
  EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("different builds")));
  r = Command("sqlite3", {Path("x.db"),
                          "UPDATE attempts SET build = '{\"commit\": \"fedcba987654\"}' "
                          "WHERE job_id IN (SELECT job_id FROM attempts ORDER BY job_id LIMIT 3)"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Command(XMOD_BIN, {"status", "smoke", "--db", Path("x.db")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("warning: sweep 'smoke' ran on 2 different builds ("));
  EXPECT_THAT(r.err, ::testing::HasSubstr("fedcba987654: 3 jobs"));
  EXPECT_THAT(r.err, ::testing::HasSubstr(": 5 jobs"));
}

// The law-driven order end to end (issue 14): `xmod run` on a sweep with
// `order: adaptive` trains every job; the coordinator says it is cheapest-first
// until six results pin the dense law down, then refits after each completion and
// writes lease order keys on the dense jobs still pending.
TEST_F(CoordinatorE2e, XmodRunWithAdaptiveOrderRefitsTheLawAndSteersThePendingJobs) {
  const std::string spec = std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/adaptive_run.yaml";
  CommandResult r =
      Command(XMOD_BIN, {"run", spec, "--db", Path("x.db"), "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("9 succeeded, 0 failed or cancelled, 0 unfinished"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("adaptive order: sweep 'adaptive-run': cheapest-first "
                                          "for now (too few points to steer by: 0 point(s)"));
  EXPECT_THAT(r.out, ::testing::HasSubstr(
                         "adaptive order: sweep 'adaptive-run': dense law refitted on 6 point(s)"));
  EXPECT_GE(Count("SELECT COUNT(*) FROM jobs WHERE order_key IS NOT NULL"), 1) << r.out;
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 9);
  r = Command(XMOD_BIN, {"check", spec});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("lease order: adaptive: 9 dense job(s) ordered by the "
                                          "dense law's expected gain at N 2.22e+05, D 4.44e+06"));
}

// Cooldown branches end to end (issue 14): per seed one constant-LR trunk and a
// branch per budget, the branches leased once the trunk's checkpoint at their
// start is recorded and resumed from it; each branch ends bit-identical to the
// same budget trained alone with the same schedule; the FLOPs are at most 0.7 of
// training the three budgets alone, as `xmod status` and `xmod expand` say.
TEST_F(CoordinatorE2e, XmodRunTrainsCooldownBranchesThatEqualTheBudgetsTrainedAlone) {
  const std::string spec = std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/wsd_branches.yaml";
  CommandResult r = Command(
      XMOD_BIN, {"run", spec, "--db", Path("x.db"), "--groups", "2", "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("8 succeeded, 0 failed or cancelled, 0 unfinished"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE role = 'trunk'"), 2);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE role = 'branch' AND start_step > 0"), 6);
  // Every branch's first attempt started at its trunk's step, not from scratch.
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts a JOIN jobs j ON j.job_id = a.job_id WHERE "
                  "j.role = 'branch' AND a.attempt = 1 AND a.resumed_from_step = j.start_step"),
            6);
  ExpectCompleteCurves();
  // The trunks kept the checkpoints their branches start from (the others pruned).
  for (const auto& row : Rows("SELECT parent_id, start_step FROM jobs WHERE role = 'branch'")) {
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08lld",
                  static_cast<long long>(std::get<int64_t>(row[1])));
    EXPECT_TRUE(std::filesystem::exists(
        Path("runs/" + std::get<std::string>(row[0]) + "/checkpoints/" + name + "/model.pt")))
        << name;
  }
  // Replicates are per budget; the bootstrap's clusters are per trunk configuration
  // (both seeds' trunks are one configuration: all six branches move together).
  EXPECT_EQ(Count("SELECT COUNT(DISTINCT config_key) FROM job_results WHERE role = 'branch'"), 3);
  EXPECT_EQ(Count("SELECT COUNT(DISTINCT cluster_key) FROM job_results WHERE role = 'branch'"), 1);
  // FLOPs: trunk (0.8 x 4D) + cooldowns 0.2 x (D + 2D + 4D), against 7D alone.
  const auto totals = Rows(
      "SELECT SUM(train_flops), SUM(standalone_flops) FROM job_results WHERE sweep = "
      "'wsd-branches'");
  ASSERT_EQ(totals.size(), 1u);
  const double ratio = std::get<double>(totals[0][0]) / std::get<double>(totals[0][1]);
  EXPECT_LE(ratio, 0.7);
  EXPECT_GT(ratio, 0.6);
  r = Command(XMOD_BIN, {"status", "--db", Path("x.db"), "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json status = nlohmann::json::parse(r.out);
  EXPECT_NEAR(status[0]["flops_vs_standalone"].get<double>(), ratio, 1e-9) << r.out;
  r = Command(XMOD_BIN, {"expand", spec});
  EXPECT_THAT(r.out, ::testing::HasSubstr("with 2 cooldown trunks and 6 branches"));

  std::ifstream in(spec);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    // One trunk and two groups: the idle group leases the first branch as soon as
    // the trunk's checkpoint at its start is recorded, while the trunk trains on.
    std::string one = text;
    one.replace(one.find("seed: [1, 2]"), 12, "seed: [1]");
    one.replace(one.find("tokens: [16384, 32768, 65536]"), 29, "tokens: [262144, 524288, 1048576]");
    std::ofstream(Path("one.yaml")) << one;
    r = Command(XMOD_BIN, {"run", Path("one.yaml"), "--db", Path("z.db"), "--groups", "2",
                           "--run-dir", Path("runs_one")});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_GT(Count("SELECT COUNT(*) FROM attempts t JOIN jobs tj ON tj.job_id = t.job_id AND "
                    "tj.role = 'trunk' JOIN jobs b ON b.parent_id = tj.job_id JOIN attempts "
                    "ab ON ab.job_id = b.job_id WHERE ab.started_at < t.ended_at",
                    "z.db"),
              0)
        << "no branch ran beside its trunk";
  }

  // The same budgets trained alone (cooldown_branches: false): bit-identical losses.
  text.replace(text.find("name: wsd-branches"), 18, "name: wsd-alone");
  text.replace(text.find("  schedule: wsd"), 15, "  cooldown_branches: false\n  schedule: wsd");
  std::ofstream(Path("alone.yaml")) << text;
  r = Command(XMOD_BIN, {"run", Path("alone.yaml"), "--db", Path("y.db"), "--groups", "2",
                         "--run-dir", Path("runs_alone")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE role = 'run'"), 0);  // x.db: none alone
  const std::string losses =
      "SELECT seed, tokens, final_val_loss FROM job_results WHERE role != 'trunk' "
      "ORDER BY seed, tokens";
  const auto branched = Rows(losses);
  const auto alone = Rows(losses, "y.db");
  ASSERT_EQ(branched.size(), 6u);
  ASSERT_EQ(alone.size(), 6u);
  for (size_t i = 0; i < branched.size(); ++i) {
    EXPECT_EQ(branched[i][0], alone[i][0]);
    EXPECT_EQ(branched[i][1], alone[i][1]);
    EXPECT_EQ(std::get<double>(branched[i][2]), std::get<double>(alone[i][2]))
        << "seed " << std::get<int64_t>(branched[i][0]) << ", " << std::get<int64_t>(branched[i][1])
        << " tokens";
  }
}

// The baselines sweep end to end: X-MoD with dense, MoD, MoE and DECO baselines
// trained by `xmod run`; every family's curves in the database with its own
// step metrics; `xmod results --baselines` pairs each sized baseline with its
// matched job; `xmod plot` draws all five families.
TEST_F(CoordinatorE2e, XmodRunTrainsEveryBaselineFamilyAndReportsThem) {
  const std::string sweep = std::string(XMOD_SOURCE_DIR) + "/sweeps/baselines.yaml";
  CommandResult r = Command(
      XMOD_BIN, {"run", sweep, "--db", Path("x.db"), "--groups", "2", "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("14 succeeded, 0 failed or cancelled, 0 unfinished"));
  EXPECT_THAT(r.err, ::testing::HasSubstr("sizing: moe at scale micro"));
  for (const char* family : {"dense", "xmod", "mod", "moe", "deco"}) {
    EXPECT_GT(Count(std::string("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND "
                                "family = '") +
                    family + "'"),
              0)
        << family;
  }
  // Per-step expert metrics, one per step of every expert job.
  EXPECT_EQ(Count("SELECT COUNT(*) FROM metrics m JOIN jobs j ON j.job_id = m.job_id WHERE "
                  "j.family = 'moe' AND m.name = 'z_loss'"),
            Count("SELECT SUM(steps) FROM jobs WHERE family = 'moe'"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM metrics m JOIN jobs j ON j.job_id = m.job_id WHERE "
                  "j.family = 'deco' AND m.name = 'activation_ratio'"),
            Count("SELECT SUM(steps) FROM jobs WHERE family = 'deco'"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM job_results WHERE family IN ('moe', 'deco') AND "
                  "final_val_loss IS NOT NULL AND param_sparsity > 0 AND expert_sparsity > 0"),
            6);
  r = Command(XMOD_BIN,
              {"results", "baselines", "--db", Path("x.db"), "--baselines", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& row : rows) {
    ASSERT_TRUE(row["loss_ratio"].is_number()) << row.dump();
    EXPECT_NEAR(row["loss_ratio"].get<double>(), 1.0, 0.1) << row.dump();
    EXPECT_NEAR(row["params_ratio"].get<double>(), 1.0, 0.15) << row.dump();
  }
  r = Command(XMOD_BIN, {"plot", "baselines", "--db", Path("x.db"), "--out", Path("plots")});
  std::ifstream in(Path("plots/xmod_vs_dense.svg"));
  ASSERT_TRUE(in.good()) << r.out << r.err;
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* text : {"X-MoD, stride s=2", "MoD baseline", "MoE baseline", "DECO baseline"}) {
    EXPECT_THAT(svg, ::testing::HasSubstr(text));
  }
  std::ifstream curves_in(Path("plots/loss_vs_tokens.svg"));
  const std::string curves((std::istreambuf_iterator<char>(curves_in)),
                           std::istreambuf_iterator<char>());
  for (const char* text : {"dense", "MoE E=", "DECO E="}) {
    EXPECT_THAT(curves, ::testing::HasSubstr(text));
  }
}

// `xmod serve --listen HOST:0 --address-file F` binds a free port and publishes it
// only after binding; a second coordinator on a taken port fails (no SO_REUSEPORT
// split of the clients) and leaves no database behind; on SIGTERM the first
// removes its address file.
TEST_F(CoordinatorE2e, ServePublishesItsBoundAddressAndRefusesATakenPort) {
  const std::string addr = Path("coordinator.addr");
  const pid_t first = testing::SpawnGroup(
      {XMOD_BIN, "serve", "--db", Path("x.db"), "--listen", "127.0.0.1:0", "--address-file", addr},
      Path("serve.log"));
  spawned_.push_back(first);
  ASSERT_TRUE(testing::WaitUntil([&] { return std::filesystem::exists(addr); }, 30))
      << testing::Slurp(Path("serve.log"));
  std::string published = testing::Slurp(addr);
  ASSERT_FALSE(published.empty());
  ASSERT_EQ(published.back(), '\n');
  published.pop_back();
  ASSERT_EQ(published.rfind("127.0.0.1:", 0), 0u) << published;
  const std::string port = published.substr(published.find(':') + 1);
  EXPECT_NE(port, "0");
  EXPECT_THAT(testing::Slurp(Path("serve.log")),
              ::testing::HasSubstr("listening on 127.0.0.1:" + port));
  // The published address serves.
  CommandResult r = Command(XMOD_BIN, {"status", "--coordinator", published});
  EXPECT_EQ(r.code, 0) << r.err;
  // A second coordinator on the same port: refused, and its database is not left.
  // (Bounded: with SO_REUSEPORT on it would bind and serve until killed.)
  r = Command("/usr/bin/timeout", {"20", XMOD_BIN, "serve", "--db", Path("second.db"), "--listen",
                                   published, "--address-file", Path("second.addr")});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("cannot listen"));
  EXPECT_FALSE(std::filesystem::exists(Path("second.db")));
  EXPECT_FALSE(std::filesystem::exists(Path("second.addr")));
  EXPECT_EQ(testing::Slurp(addr), published + "\n");  // the first one's file is untouched
  // --advertise without --address-file would be ignored: refused, nothing written.
  r = Command(XMOD_BIN, {"serve", "--db", Path("third.db"), "--listen", "127.0.0.1:0",
                         "--advertise", "node7"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--advertise"));
  EXPECT_FALSE(std::filesystem::exists(Path("third.db")));
  ::kill(first, SIGTERM);
  EXPECT_EQ(testing::WaitExit(first, 30), 0);
  EXPECT_FALSE(std::filesystem::exists(addr));
}

// A group started with --coordinator-file follows the file: the coordinator is
// killed and comes back on another port (as after a requeue onto another node),
// writes its new address there, and the group reconnects and finishes the job.
TEST_F(CoordinatorE2e, AGroupFollowsItsCoordinatorFileToANewAddress) {
  const std::string addr = Path("coordinator.addr");
  pid_t serve = Serve(testing::FreePort(), 5, {"--address-file", addr});
  const std::string first = testing::Slurp(addr);
  Submit(std::stoi(first.substr(first.find(':') + 1)), Fixture("long.yaml"));
  const pid_t a = Group(0, 1, "a", {"--coordinator-file", addr});
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 20") > 0; }, 120))
      << testing::Slurp(Path("a.log"));
  SignalTree(serve, SIGKILL);  // its address file stays, pointing at a dead port
  testing::WaitExit(serve, 10);
  const int moved = testing::FreePort();
  serve = Serve(moved, 5, {"--address-file", addr});
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return testing::Slurp(addr) == "127.0.0.1:" + std::to_string(moved) + "\n"; }, 30));
  EXPECT_EQ(testing::WaitExit(a, 180), 0) << testing::Slurp(Path("a.log"));
  EXPECT_THAT(
      testing::Slurp(Path("a.log")),
      ::testing::HasSubstr("address changed in " + addr + ": " + first.substr(0, first.size() - 1) +
                           " -> 127.0.0.1:" + std::to_string(moved)));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1);
  ExpectCompleteCurves();
}

// A group whose coordinator stays away past --unreachable-timeout checkpoints,
// stops and exits with 75 (its allocation freed) instead of waiting without end;
// a restarted coordinator hands the job to the next group, which resumes it from
// the last recorded checkpoint with a complete curve, without counting the lost
// lease as a failure of the job.
TEST_F(CoordinatorE2e, AGroupThatCannotReachItsCoordinatorStopsAndExitsWithinItsBound) {
  const int port = testing::FreePort();
  pid_t serve = Serve(port, 30);
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 2, "a", {"--unreachable-timeout", "4"});
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 20") > 0; }, 120))
      << testing::Slurp(Path("a.log"));
  SignalTree(serve, SIGKILL);
  testing::WaitExit(serve, 10);
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_EQ(testing::WaitExit(a, 60), 75) << testing::Slurp(Path("a.log"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(took, 30.0) << "the group took " << took << " s to give up";
  EXPECT_THAT(
      testing::Slurp(Path("a.log")),
      ::testing::HasSubstr("no answer from the coordinator at 127.0.0.1:" + std::to_string(port)));
  const int64_t recorded = Count("SELECT MAX(step) FROM checkpoints");
  serve = Serve(port, 1);  // the short TTL lets the old lease run out at once
  const pid_t b = Group(port, 2, "b");
  EXPECT_EQ(testing::WaitExit(b, 180), 0) << testing::Slurp(Path("b.log"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"), 1)
      << testing::Slurp(Path("b.log")) << testing::Slurp(Path("serve.log"));
  EXPECT_EQ(Count("SELECT resumed_from_step FROM attempts WHERE attempt = 2"), recorded);
  // The outage was the coordinator's: the lost lease does not count against the job.
  EXPECT_EQ(Count("SELECT COUNT(*) FROM attempts WHERE attempt = 1 AND status = 'preempted'"), 1);
  EXPECT_EQ(Count("SELECT SUM(failures) FROM jobs"), 0);
  ExpectCompleteCurves();
}

// A group told to stop (SIGTERM, as scancel does) while its coordinator is away
// ends within the stop grace, even with no unreachable bound: a job's reports
// stop retrying. (It used to retry ReportMetrics until SIGKILL.)
TEST_F(CoordinatorE2e, AGroupStoppedDuringAnOutageExitsWithinTheStopGrace) {
  const int port = testing::FreePort();
  pid_t serve = Serve(port, 30);
  Submit(port, Fixture("long.yaml"));
  const pid_t a = Group(port, 1, "a", {"--unreachable-timeout", "0"});
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return Count("SELECT COUNT(*) FROM checkpoints WHERE step >= 10") > 0; }, 120))
      << testing::Slurp(Path("a.log"));
  SignalTree(serve, SIGKILL);
  testing::WaitExit(serve, 10);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a report is now retrying
  const std::vector<pid_t> tree = ProcessTree(a);
  for (size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGTERM);
  const auto signalled = std::chrono::steady_clock::now();
  EXPECT_EQ(testing::WaitExit(a, 90), 0) << testing::Slurp(Path("a.log"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_LT(took, 45.0) << testing::Slurp(Path("a.log"));  // 15 s grace + one 10 s try
}

// A worker group's default thread count follows the CPUs it was given, not the
// node's cores: under `taskset -c 0` it is 1; unbound it is every allowed CPU.
TEST_F(CoordinatorE2e, WorkerThreadsFollowTheCpuAffinityUnderTaskset) {
  const int port = testing::FreePort();
  Serve(port, 30);
  auto group = [&](bool pinned, const std::string& name) {
    std::vector<std::string> argv;
    if (pinned) argv = {"/usr/bin/taskset", "-c", "0"};
    for (const std::string& a :
         {std::string(MPIEXEC), std::string("-np"), std::string("1"),
          std::string("--allow-run-as-root"), std::string("--oversubscribe"),
          std::string("--bind-to"), std::string("none"), std::string(XMOD_WORKER_BIN),
          std::string("--coordinator"), "127.0.0.1:" + std::to_string(port),
          std::string("--run-dir"), Path("runs"), std::string("--name"), name,
          std::string("--exit-when-idle")}) {
      argv.push_back(a);
    }
    const pid_t pid = testing::SpawnGroup(argv, Path(name + ".log"));
    spawned_.push_back(pid);
    EXPECT_EQ(testing::WaitExit(pid, 60), 0) << testing::Slurp(Path(name + ".log"));
    return testing::Slurp(Path(name + ".log"));
  };
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  const int allowed = CPU_COUNT(&mine);
  EXPECT_THAT(group(true, "pinned"),
              ::testing::HasSubstr("1 LibTorch threads per rank (1 CPUs allowed / 1 rank(s)"));
  EXPECT_THAT(group(false, "free"),
              ::testing::HasSubstr(std::to_string(allowed) + " LibTorch threads per rank (" +
                                   std::to_string(allowed) + " CPUs allowed / 1 rank(s)"));
}

// sweeps/moe.yaml: a moe-family sweep with its dense baseline trains end to end;
// xmod run fits the dense and MoE laws and stores both; xmod fit gives the MoE
// law's intervals.
TEST_F(CoordinatorE2e, XmodRunTrainsAMoeSweepAndFitsTheMoeLaw) {
  const std::string sweep = std::string(XMOD_SOURCE_DIR) + "/sweeps/moe.yaml";
  CommandResult r = Command(
      XMOD_BIN, {"run", sweep, "--db", Path("x.db"), "--groups", "2", "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("27 succeeded, 0 failed or cancelled, 0 unfinished"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("law moe (two-stage): 27 points"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("--law xmod")));  // no X-MoD runs
  EXPECT_EQ(Count("SELECT COUNT(*) FROM fits WHERE law = 'moe' AND n_points = 27"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM fits WHERE law = 'dense' AND n_points = 9"), 1);
  r = Command(XMOD_BIN, {"fit", "moe", "--db", Path("x.db"), "--law", "moe", "--bootstrap", "12",
                         "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["n_points"], 27);
  for (const char* name : {"delta", "gamma", "omega", "zeta"}) {
    ASSERT_TRUE(fit["intervals"].contains(name)) << fit.dump();
    EXPECT_LE(fit["intervals"][name][0].get<double>(), fit["params"][name].get<double>()) << name;
    EXPECT_GE(fit["intervals"][name][1].get<double>(), fit["params"][name].get<double>()) << name;
  }
  EXPECT_LT(fit["rmse"].get<double>(), 0.1);  // the law describes real losses, if loosely
  // The plots' predicted-vs-observed view is the MoE law's.
  r = Command(XMOD_BIN, {"plot", "moe", "--db", Path("x.db"), "--out", Path("plots")});
  std::ifstream in(Path("plots/predicted_vs_observed.svg"));
  ASSERT_TRUE(in.good()) << r.out << r.err;
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(svg, ::testing::HasSubstr("MoE law (two-stage)"));
  // The planner on the fitted laws (issue 34): dense and both expansions at two
  // widths on 64 H100s, each with its layout, tokens and loss interval, and the
  // two optima; marked as the extrapolation it is (the runs are d 32-64).
  const std::string h100 = std::string(XMOD_SOURCE_DIR) + "/clusters/h100-sxm.yaml";
  r = Command(XMOD_BIN, {"plan", "moe", "--db", Path("x.db"), "--cluster", h100, "--gpu-hours",
                         "50000", "--context", "32", "--gpus", "64", "--widths", "2048,4096",
                         "--bootstrap", "12", "--format", "json", "--extrapolate"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json plan = nlohmann::json::parse(r.out);
  ASSERT_EQ(plan["rows"].size(), 6u);
  for (const auto& row : plan["rows"]) {
    EXPECT_LE(row["loss_low"].get<double>(), row["loss_high"].get<double>());
    EXPECT_GT(row["tokens"].get<double>(), 0.0);
  }
  EXPECT_FALSE(plan["best"].get<std::string>().empty());
  EXPECT_FALSE(plan["flops_only_best"].get<std::string>().empty());
  EXPECT_THAT(plan["extrapolation"].get<std::string>(), ::testing::HasSubstr("beyond"));
  // The sweep's own jobs calibrate the CPU profile: one measured run per job.
  const std::string cpu = std::string(XMOD_SOURCE_DIR) + "/clusters/cpu-2core.yaml";
  r = Command(XMOD_BIN, {"plan", "calibrate", "--cluster", cpu, "--db", Path("x.db"), "--sweep",
                         "moe", "--out", Path("cal.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream cal_in(Path("cal.json"));
  const nlohmann::json cal = nlohmann::json::parse(cal_in);
  EXPECT_EQ(cal["fit"]["rows"], 27);
  EXPECT_EQ(cal["cluster"], "cpu-2core");
  // Issue 35: a MoE job's weights as safetensors, read by Python's standard
  // library from the format's specification (length, JSON header, data).
  r = Command(XMOD_BIN, {"sql", "--db", Path("x.db"), "--format", "csv",
                         "SELECT job_id FROM job_results WHERE family = 'moe' LIMIT 1"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = r.out.substr(r.out.find('\n') + 1, 16);
  r = Command(XMOD_BIN, {"export", job, "--db", Path("x.db"), "--out", Path("export")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("model.safetensors"));
  r = Command("python3",
              {"-c",
               "import json, struct, sys\n"
               "f = open(sys.argv[1], 'rb')\n"
               "n, = struct.unpack('<Q', f.read(8))\n"
               "h = json.loads(f.read(n))\n"
               "data = f.read()\n"
               "meta = h.pop('__metadata__')\n"
               "spans = sorted(tuple(t['data_offsets']) for t in h.values())\n"
               "assert spans[0][0] == 0 and spans[-1][1] == len(data)\n"
               "assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))\n"
               "assert all(t['dtype'] == 'F32' for t in h.values())\n"
               "print(meta['xmod_job_id'], len(h), any(k.endswith('.w13') for k in h))\n",
               Path("export/model.safetensors")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith(job + " "));
  EXPECT_THAT(r.out, ::testing::HasSubstr(" True"));  // the experts' weights are there
  std::ifstream config_in(Path("export/config.json"));
  EXPECT_EQ(nlohmann::json::parse(config_in)["family"], "moe");
  r = Command(XMOD_BIN,
              {"export", job, "--db", Path("x.db"), "--out", Path("e2"), "--format", "gguf"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("--format: 'gguf'"));
  r = Command(XMOD_BIN, {"export", "0123456789abcdef", "--db", Path("x.db"), "--out", Path("e3")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, ::testing::HasSubstr("no job '0123456789abcdef'"));
}

// sweeps/mol.yaml's grid (issue 33): Mixture-of-Layers runs at two block sparsities, their
// dense baseline and the dense model with Gated DeltaNet in every layer or every
// other one train end to end; xmod run fits the dense and mol laws; the results
// view gives each mol run its routed blocks and top_k and each gdn run its share
// of DeltaNet layers; xmod advise ranks the MoL and gdn configurations with their
// laws; the plots draw the mol law.
TEST_F(CoordinatorE2e, XmodRunTrainsAMolSweepAndFitsTheMolLaw) {
  // sweeps/mol.yaml's grid at a quarter of its tokens (the fixture says why).
  const std::string sweep = std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/mol_e2e.yaml";
  CommandResult r = Command(
      XMOD_BIN, {"run", sweep, "--db", Path("x.db"), "--groups", "2", "--run-dir", Path("runs")});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("45 succeeded, 0 failed or cancelled, 0 unfinished"));
  const std::string run_out = r.out;
  EXPECT_THAT(r.out, ::testing::HasSubstr("law mol (two-stage): 27 points"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("law gdn (two-stage): 27 points"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM job_results WHERE family = 'gdn' AND status = 'succeeded' "
                  "AND final_val_loss > 0 AND (sparsity = 1.0 OR sparsity = 0.5)"),
            18);
  EXPECT_THAT(r.out, ::testing::HasSubstr("hybrid GDN (50% softmax layers)"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("dense GDN"));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM fits WHERE law = 'mol' AND n_points = 27"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM job_results WHERE family = 'mol' AND "
                  "((experts = 4 AND top_k = 2 AND sparsity = 0.5) OR "
                  "(experts = 8 AND top_k = 2 AND sparsity = 0.75))"),
            18);
  // Every MoL run logged its realised block loads.
  EXPECT_EQ(Count("SELECT COUNT(DISTINCT m.job_id) FROM metrics m JOIN jobs j ON j.job_id = "
                  "m.job_id WHERE j.family = 'mol' AND m.name = 'block_load_spread'"),
            18);
  r = Command(XMOD_BIN, {"fit", "mol", "--db", Path("x.db"), "--law", "mol", "--bootstrap", "12",
                         "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json fit = nlohmann::json::parse(r.out);
  EXPECT_EQ(fit["n_points"], 27);
  for (const char* name : {"eta", "c_m"}) {
    ASSERT_TRUE(fit["intervals"].contains(name)) << fit.dump();
    EXPECT_LE(fit["intervals"][name][0].get<double>(), fit["params"][name].get<double>()) << name;
    EXPECT_GE(fit["intervals"][name][1].get<double>(), fit["params"][name].get<double>()) << name;
  }
  EXPECT_LT(fit["rmse"].get<double>(), 0.1);
  // xmod run advised at the largest compute every configuration ran; there every
  // row is inside its own runs. A row whose optimum sits on the edge of the
  // searched sizes carries a '*'.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run_out, m,
                                std::regex("xmod advise mol --db \\S+ --compute (\\S+) --context "
                                           "32 \\(the largest compute every configuration ran\\)")))
      << run_out;
  const std::string compute = m[1];
  EXPECT_LT(std::stod(compute), 1.0e10);
  r = Command(XMOD_BIN, {"advise", "mol", "--db", Path("x.db"), "--compute", compute, "--context",
                         "32", "--bootstrap", "8"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("mol E_b=2 [ *]+ mol "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("mol E_b=4 [ *]+ mol "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("gdn share=1 [ *]+ gdn "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("gdn share=0.5 [ *]+ gdn "));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("not ranked")));
  // Past the dense runs' own largest compute the advice is refused, naming them.
  r = Command(XMOD_BIN, {"advise", "mol", "--db", Path("x.db"), "--compute", "1e10", "--context",
                         "32", "--bootstrap", "0"});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("its largest compute run"));
  r = Command(XMOD_BIN, {"plot", "mol", "--db", Path("x.db"), "--out", Path("plots")});
  std::ifstream in(Path("plots/predicted_vs_observed.svg"));
  ASSERT_TRUE(in.good()) << r.out << r.err;
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(svg, ::testing::HasSubstr("MoL law (two-stage)"));
}

// Each local group is its own mpirun. With binding left on, every one pins its
// rank to core 0, and G groups share one core. A rank started the way `xmod run`
// starts a group must be allowed on every core this process may use.
TEST_F(CoordinatorE2e, XmodRunGroupsAreNotPinnedToOneCore) {
  const auto allowed = [](const std::string& status) {
    const size_t at = status.find("Cpus_allowed_list:");
    if (at == std::string::npos) return std::string("(none)");
    const size_t end = status.find('\n', at);
    std::string value = status.substr(at + 18, end - at - 18);
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  };
  const std::string mine = allowed(testing::Slurp("/proc/self/status"));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  LocalRunOptions o;
  o.mpirun = MPIEXEC;
  o.groups = cores;  // one rank per core: the case where mpirun would bind
  o.ranks = 1;
  std::vector<std::string> argv = GroupMpirunPrefix(o, cores);
  ASSERT_FALSE(argv.empty());
  const std::string program = argv.front();
  argv.erase(argv.begin());
  argv.insert(argv.end(), {"/bin/cat", "/proc/self/status"});
  CommandResult r = Command(program, argv);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(allowed(r.out), mine) << r.out;
}

}  // namespace
}  // namespace xmod
