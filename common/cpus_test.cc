#include "common/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <thread>

namespace xmod {
namespace {

// Restricts this process to its first allowed CPU for the test's duration.
class OneCpu {
 public:
  OneCpu() {
    CPU_ZERO(&saved_);
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &saved_)) {
        CPU_SET(c, &one);
        break;
      }
    }
    ok_ = sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~OneCpu() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

TEST(Cpus, TheAffinityMaskNotTheCoreCountDecides) {
  unsetenv("SLURM_CPUS_PER_TASK");
  const int all = AllowedCpus();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(DefaultThreadsPerRank(1), all);
  {
    OneCpu one;
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(AllowedCpus(), 1);
    std::string why;
    EXPECT_EQ(DefaultThreadsPerRank(1, &why), 1);
    EXPECT_EQ(why, "1 CPUs allowed / 1 rank(s) on this node");
    EXPECT_EQ(DefaultThreadsPerRank(4), 1);  // never below one
  }
  EXPECT_EQ(AllowedCpus(), all);
}

TEST(Cpus, SlurmCpusPerTaskIsUsedAndCappedByTheAffinity) {
  setenv("SLURM_CPUS_PER_TASK", "1", 1);
  EXPECT_EQ(DefaultThreadsPerRank(1), 1);
  setenv("SLURM_CPUS_PER_TASK", "512", 1);
  EXPECT_EQ(DefaultThreadsPerRank(1), AllowedCpus());
  setenv("SLURM_CPUS_PER_TASK", "junk", 1);
  EXPECT_EQ(DefaultThreadsPerRank(1), AllowedCpus());
  unsetenv("SLURM_CPUS_PER_TASK");
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
  EXPECT_EQ(LocalRanks(8), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
  EXPECT_EQ(LocalRanks(8), 4);
  unsetenv("SLURM_NTASKS_PER_NODE");
  EXPECT_EQ(LocalRanks(8), 8);
}

}  // namespace
}  // namespace xmod
