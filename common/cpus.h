// How many CPUs this process may run on, and the default LibTorch thread count
// per rank that follows from it. The count is the process's CPU affinity
// (sched_getaffinity), which is what Slurm's task/affinity or task/cgroup, a
// container's cpuset, `taskset` or `mpirun --bind-to` give it; the node's core
// count (std::thread::hardware_concurrency) ignores all of them.
#ifndef XMOD_COMMON_CPUS_H_
#define XMOD_COMMON_CPUS_H_

#include <string>

namespace xmod {

// CPUs in this process's affinity mask (at least 1); the core count when the
// mask cannot be read.
int AllowedCpus();

// The default threads per rank: Slurm's --cpus-per-task when set (SLURM_CPUS_PER_TASK,
// capped by the affinity), otherwise the allowed CPUs shared by the ranks of this
// node (`local_ranks`). `why` (optional) says which rule gave it, for the log.
int DefaultThreadsPerRank(int local_ranks, std::string* why = nullptr);

// The ranks of this group on this node: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI),
// SLURM_NTASKS_PER_NODE, or `world` when neither is set.
int LocalRanks(int world);

}  // namespace xmod

#endif  // XMOD_COMMON_CPUS_H_
