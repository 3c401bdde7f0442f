// Times the expansion of bench/grid-10k.yaml (10,000 jobs): parse + expand, and
// expand alone, with jobs per second. Run: build/bin/expand_bench
#include <benchmark/benchmark.h>

#include "orchestrator/sweep/expand.h"
#include "tests/paths/paths.h"

namespace xmod {
namespace {

const std::string kGrid = std::string(XMOD_SOURCE_DIR) + "/bench/grid-10k.yaml";

void BM_ParseAndExpand10k(benchmark::State& state) {
  size_t jobs = 0;
  for (auto _ : state) {
    auto spec = LoadSweepSpec(kGrid);
    auto expanded = ExpandSweep(*spec);
    jobs = expanded->size();
    benchmark::DoNotOptimize(expanded);
  }
  state.counters["jobs"] = static_cast<double>(jobs);
  state.counters["jobs_per_s"] =
      benchmark::Counter(static_cast<double>(jobs), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ParseAndExpand10k)->Unit(benchmark::kMillisecond);

void BM_Expand10k(benchmark::State& state) {
  const SweepSpec spec = *LoadSweepSpec(kGrid);
  size_t jobs = 0;
  for (auto _ : state) {
    auto expanded = ExpandSweep(spec);
    jobs = expanded->size();
    benchmark::DoNotOptimize(expanded);
  }
  state.counters["jobs_per_s"] =
      benchmark::Counter(static_cast<double>(jobs), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Expand10k)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace xmod

BENCHMARK_MAIN();
