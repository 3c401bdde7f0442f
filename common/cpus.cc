#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace xmod {

namespace {

// A positive whole number from the environment, or 0.
int EnvCount(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  // SLURM_NTASKS_PER_NODE may read "4(x2)"; its leading count is the one here.
  if (end == value || n <= 0 || n > 1 << 20) return 0;
  return static_cast<int>(n);
}

}  // namespace

int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int LocalRanks(int world) {
  if (const int n = EnvCount("OMPI_COMM_WORLD_LOCAL_SIZE"); n > 0) return n;
  if (const int n = EnvCount("SLURM_NTASKS_PER_NODE"); n > 0) return n;
  return std::max(1, world);
}

int DefaultThreadsPerRank(int local_ranks, std::string* why) {
  const int cpus = AllowedCpus();
  if (const int per_task = EnvCount("SLURM_CPUS_PER_TASK"); per_task > 0) {
    if (why != nullptr) {
      *why = "SLURM_CPUS_PER_TASK=" + std::to_string(per_task) + ", " + std::to_string(cpus) +
             " CPUs allowed";
    }
    return std::max(1, std::min(cpus, per_task));
  }
  const int ranks = std::max(1, local_ranks);
  if (why != nullptr) {
    *why =
        std::to_string(cpus) + " CPUs allowed / " + std::to_string(ranks) + " rank(s) on this node";
  }
  return std::max(1, cpus / ranks);
}

}  // namespace xmod
