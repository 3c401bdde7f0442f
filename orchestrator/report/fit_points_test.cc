// Which jobs become law points, and how the bootstrap groups them, for cooldown
// branches (issue 14): a trunk's loss (taken before any cooldown) is never a
// point; each branch end is one (N, D) point at its whole budget, grouped with
// the other branches of its trunk.
#include <gtest/gtest.h>

#include "orchestrator/report/report.h"

namespace xmod {
namespace {

JobResultRow Dense(const std::string& id, JobRole role, int64_t tokens) {
  JobResultRow j;
  j.id = id;
  j.family = Family::kDense;
  j.scale = "micro";
  j.state = JobState::kSucceeded;
  j.role = role;
  j.config_key = "config-" + id;
  j.cluster_key = role == JobRole::kBranch ? "trunk-config" : j.config_key;
  j.tokens = tokens;
  j.tokens_trained = tokens;
  j.context = 32;
  j.n_active = 53536;
  j.final_val_loss = 3.0;
  return j;
}

TEST(FitPoints, TrunksAreNotPointsAndBranchesClusterByTheirTrunk) {
  const std::vector<JobResultRow> jobs = {
      Dense("t", JobRole::kTrunk, 52224), Dense("b1", JobRole::kBranch, 16384),
      Dense("b2", JobRole::kBranch, 32768), Dense("b4", JobRole::kBranch, 65536),
      Dense("r", JobRole::kRun, 16384)};
  const std::vector<LawPoint> points = FitPoints(jobs, PointOptions{});
  ASSERT_EQ(points.size(), 4u);
  for (const LawPoint& p : points) {
    EXPECT_NE(p.id, "t");
    EXPECT_EQ(p.config, "config-" + p.id);  // replicates: per budget
    if (p.id == "r") {
      EXPECT_EQ(p.cluster, "config-r");
    } else {
      EXPECT_EQ(p.cluster, "trunk-config") << p.id;  // resampled together
    }
  }
  EXPECT_EQ(points[2].d, 65536.0);  // a branch counts its whole budget, trunk part included
}

// A moe job's expansion is E / k: the number of experts over those a token uses.
// It read E alone while a local flag (top-k loss or causal) shadowed the job's k.
TEST(ToLawPoint, AMoeJobsExpansionIsItsExpertsOverTopK) {
  JobResultRow j = Dense("m", JobRole::kRun, 16384);
  j.family = Family::kMoe;
  j.experts = 8;
  j.top_k = 2;
  const LawPoint p = ToLawPoint(j);
  EXPECT_EQ(p.expansion, 4.0);
  EXPECT_EQ(p.stride, 1.0);
  EXPECT_EQ(p.capacity, 1.0);
}

}  // namespace
}  // namespace xmod
