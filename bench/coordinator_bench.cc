// Coordinator benchmarks, measured side by side in one run on a real SQLite file
// and a real gRPC server on loopback:
//   1. 64 simulated worker groups (gRPC clients that do no training) lease,
//      heartbeat, report 100 metrics and complete 10,000 no-op jobs: jobs per
//      second end to end (target >= 1,000);
//   2. metric ingest over gRPC in 1,000-point batches vs raw batched inserts of
//      the same points into the same schema through the store (target >= 0.25);
//   3. the cost of durability: run 1 with synchronous=NORMAL instead of the
//      store's default FULL, in rounds alternating with run 1 (no target).
// Ratios are medians of the pairwise ratios of alternating rounds, with their
// range (bench/paired_ratio.h).
// Exits 1 when a target is missed. Usage: coordinator_bench [--groups N] [--rounds R]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/paired_ratio.h"
#include "orchestrator/service/server.h"
#include "proto/channel.h"
#include "tests/paths/paths.h"
#include "xmod/v1/coordinator.grpc.pb.h"

namespace xmod {
namespace {

namespace pb = ::xmod::v1;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Coordinator {
  explicit Coordinator(const std::string& db, bool durable = true) {
    std::filesystem::remove(db);
    std::filesystem::remove(db + "-wal");
    std::filesystem::remove(db + "-shm");
    SqliteStore::Options o;
    o.path = db;
    o.durable = durable;
    store = std::move(SqliteStore::Open(o).value());
    SchedulerOptions so;
    so.lease_ttl_seconds = 600;
    scheduler = std::make_unique<Scheduler>(store.get(), so);
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    server = std::move(CoordinatorServer::Start(scheduler.get(), options).value());
  }
  std::unique_ptr<SqliteStore> store;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<CoordinatorServer> server;
};

pb::ReportMetricsRequest Batch(const std::string& job, int64_t token, int64_t first, int n) {
  pb::ReportMetricsRequest r;
  r.set_job_id(job);
  r.set_fencing_token(token);
  for (int i = 0; i < n; ++i) {
    pb::Metric* m = r.add_metrics();
    m->set_name("train_loss");
    m->set_step(first + i);
    m->set_value(3.0 + 1.0 / (first + i));
    m->set_tokens((first + i) * 4096);
    m->set_flops((first + i) * 1e9);
  }
  return r;
}

// 1. No-op jobs through the whole lease protocol.
double JobsPerSecond(const std::string& dir, int groups, int64_t* jobs_done, bool durable = true) {
  Coordinator c(dir + "/jobs.db", durable);
  auto submitted = c.scheduler->Submit(
      ReadText(std::string(XMOD_SOURCE_DIR) + "/bench/grid-10k.yaml"), "grid-10k.yaml",
      /*allow_unidentifiable=*/true);  // no-op jobs: the design is not what is measured
  if (!submitted.ok()) {
    std::fprintf(stderr, "%s\n", std::string(submitted.status().message()).c_str());
    std::exit(1);
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 8; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("xmod.channel", i);  // distinct arguments: distinct connections
    channels.push_back(
        grpc::CreateCustomChannel(c.server->address(), grpc::InsecureChannelCredentials(), args));
  }
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int g = 0; g < groups; ++g) {
    threads.emplace_back([&, g] {
      auto stub = pb::Coordinator::NewStub(channels[g % channels.size()]);
      auto call = [&](auto rpc, const auto& req, auto* resp) {
        grpc::ClientContext context;
        grpc::Status s = ((*stub).*rpc)(&context, req, resp);
        if (!s.ok()) {
          std::fprintf(stderr, "group %d: %s\n", g, s.error_message().c_str());
          failed = true;
        }
        return s.ok();
      };
      pb::RegisterWorkerRequest reg;
      reg.set_host("bench");
      reg.set_ranks(1);
      pb::RegisterWorkerResponse worker;
      if (!call(&pb::Coordinator::Stub::RegisterWorker, reg, &worker)) return;
      while (!failed) {
        pb::LeaseJobRequest lreq;
        lreq.set_worker_id(worker.worker_id());
        pb::LeaseJobResponse lease;
        if (!call(&pb::Coordinator::Stub::LeaseJob, lreq, &lease)) return;
        if (!lease.has_job()) {
          if (lease.idle() == pb::LeaseJobResponse::IDLE_DONE) return;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        pb::HeartbeatRequest hb;
        hb.set_worker_id(worker.worker_id());
        hb.set_job_id(lease.job_id());
        hb.set_fencing_token(lease.fencing_token());
        hb.set_step(1);
        pb::HeartbeatResponse beat;
        pb::ReportMetricsResponse none1;
        pb::CompleteJobResponse none2;
        // A job completes only at its last step, and reports stay within its steps.
        const int64_t steps = nlohmann::json::parse(lease.job_json()).at("steps").get<int64_t>();
        pb::CompleteJobRequest complete;
        complete.set_job_id(lease.job_id());
        complete.set_fencing_token(lease.fencing_token());
        complete.set_step(steps);
        if (!call(&pb::Coordinator::Stub::Heartbeat, hb, &beat) ||
            !call(&pb::Coordinator::Stub::ReportMetrics,
                  Batch(lease.job_id(), lease.fencing_token(), 1,
                        static_cast<int>(std::min<int64_t>(100, steps))),
                  &none1) ||
            !call(&pb::Coordinator::Stub::CompleteJob, complete, &none2)) {
          return;
        }
        ++done;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = Since(start);
  *jobs_done = done;
  if (failed) std::exit(1);
  return static_cast<double>(done) / seconds;
}

// 2. Rows per second: raw store batches vs gRPC batches, `rounds` alternating rounds.
void IngestRates(const std::string& dir, int rounds, std::vector<double>* raw,
                 std::vector<double>* rpc) {
  constexpr int kBatch = 1000, kBatches = 60;
  Coordinator c(dir + "/ingest.db");
  // Jobs with 60,000 steps (the fixture `long`, widened and lengthened): every row
  // a worker could really send, since a metric's step must lie within its job's.
  std::string yaml = ReadText(std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/long.yaml");
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"name: long", "name: ingest"},
        {"sparsity: [0.5]", "sparsity: [0.25, 0.5, 0.75]\n  stride: [2, 4]"},
        {"  stride: [2]\n", ""},
        {"tokens: 245760", "tokens: 122880000"}}) {
    const size_t at = yaml.find(from);
    if (at == std::string::npos) std::exit(1);
    yaml.replace(at, from.size(), to);
  }
  auto submitted = c.scheduler->Submit(yaml, "ingest.yaml", /*allow_unidentifiable=*/true);
  if (!submitted.ok() || submitted->jobs_in_spec < 2 * rounds) {
    std::fprintf(stderr, "ingest sweep: %s\n", submitted.status().ToString().c_str());
    std::exit(1);
  }
  const std::string worker = c.scheduler->RegisterWorker("bench", 1, "").value();
  auto stub = pb::Coordinator::NewStub(
      grpc::CreateChannel(c.server->address(), grpc::InsecureChannelCredentials()));
  for (int round = 0; round < rounds; ++round) {
    // Raw: one job's rows straight into the store's fenced path (the one metric
    // upsert, which ReportMetrics also ends in), a transaction per batch.
    const LeaseGrant a = c.scheduler->Lease(worker).value().grant.value();
    std::vector<std::vector<MetricPoint>> batches(kBatches);
    for (int b = 0; b < kBatches; ++b) {
      for (int i = 0; i < kBatch; ++i) {
        const int64_t step = 1 + b * kBatch + i;
        batches[b].push_back({a.job_id, "train_loss", step, 3.0 + 1.0 / step, step * 4096,
                              step * 1e9, a.attempt, 0.0});
      }
    }
    auto t = std::chrono::steady_clock::now();
    for (const auto& batch : batches) {
      if (!c.store->AppendFencedMetrics(a.job_id, a.fencing_token, batch, 0.0).ok()) std::exit(1);
    }
    raw->push_back(kBatch * kBatches / Since(t));
    // gRPC: another job's rows, the same sizes, through ReportMetrics.
    const LeaseGrant g = c.scheduler->Lease(worker).value().grant.value();
    std::vector<pb::ReportMetricsRequest> requests;
    for (int b = 0; b < kBatches; ++b) {
      requests.push_back(Batch(g.job_id, g.fencing_token, 1 + b * kBatch, kBatch));
    }
    t = std::chrono::steady_clock::now();
    for (const auto& request : requests) {
      grpc::ClientContext context;
      pb::ReportMetricsResponse none;
      grpc::Status s = stub->ReportMetrics(&context, request, &none);
      if (!s.ok()) {
        std::fprintf(stderr, "ReportMetrics: %s\n", s.error_message().c_str());
        std::exit(1);
      }
    }
    rpc->push_back(kBatch * kBatches / Since(t));
  }
}

}  // namespace
}  // namespace xmod

int main(int argc, char** argv) {
  using xmod::bench::Median;
  using xmod::bench::Paired;
  int groups = 64, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--groups")) groups = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("xmod_coordinator_bench_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  bool met = true;

  // 1 and 3 alternate: FULL, NORMAL, FULL, NORMAL, ...
  std::vector<double> full, normal;
  int64_t jobs = 0;
  for (int r = 0; r < rounds; ++r) {
    full.push_back(xmod::JobsPerSecond(dir, groups, &jobs));
    int64_t jobs_normal = 0;
    normal.push_back(xmod::JobsPerSecond(dir, groups, &jobs_normal, /*durable=*/false));
  }
  const double rate = Median(full);
  met &= rate >= 1000;
  std::printf(
      "1. %d simulated groups: %lld no-op jobs leased, heartbeated, 100 metrics, "
      "completed: %.0f jobs/s, median of %d rounds (target >= 1000: %s)\n",
      groups, static_cast<long long>(jobs), rate, rounds, rate >= 1000 ? "met" : "MISSED");

  std::vector<double> raw, grpc_rate;
  xmod::IngestRates(dir, std::max(3, rounds), &raw, &grpc_rate);
  const xmod::bench::PairedRatio ingest = Paired(grpc_rate, raw);
  met &= ingest.median >= 0.25;
  std::printf(
      "2. metric ingest, 1000-point batches: gRPC %.0f rows/s vs raw SQLite %.0f rows/s: "
      "ratio %s (target >= 0.25: %s)\n",
      Median(grpc_rate), Median(raw), ingest.Text().c_str(),
      ingest.median >= 0.25 ? "met" : "MISSED");
  std::printf(
      "3. durability: %.0f jobs/s with synchronous=FULL (the default) vs %.0f with "
      "NORMAL: ratio %s\n",
      rate, Median(normal), Paired(full, normal).Text().c_str());
  std::filesystem::remove_all(dir);
  return met ? 0 : 1;
}
