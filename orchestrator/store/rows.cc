#include "orchestrator/store/rows.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace xmod {

std::string_view JobRoleName(JobRole role) {
  switch (role) {
    case JobRole::kRun:
      return "run";
    case JobRole::kTrunk:
      return "trunk";
    case JobRole::kBranch:
      return "branch";
  }
  return "run";
}

absl::StatusOr<JobRole> ParseJobRole(std::string_view name) {
  for (JobRole role : {JobRole::kRun, JobRole::kTrunk, JobRole::kBranch}) {
    if (JobRoleName(role) == name) return role;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job role '", std::string(name), "' (known: run, trunk, branch)"));
}

bool JobResultRow::MatchedXmodPoint(double* sparsity_out, int64_t* stride_out) const {
  double s = 0.0;
  long long k = 0;
  if (std::sscanf(matched_to.c_str(), "xmod sparsity %lf stride %lld", &s, &k) != 2) return false;
  *sparsity_out = s;
  *stride_out = static_cast<int64_t>(k);
  return true;
}

std::optional<double> JobResultRow::Loss(const std::string& metric) const {
  if (metric == "val_loss" || !causal_metric()) return final_val_loss;
  return final_val_loss_causal;
}

}  // namespace xmod
