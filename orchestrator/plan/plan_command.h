// `xmod plan predict | calibrate | layout` (docs/planner.md): the command side
// of the planner, flags already parsed.
#ifndef XMOD_ORCHESTRATOR_PLAN_PLAN_COMMAND_H_
#define XMOD_ORCHESTRATOR_PLAN_PLAN_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace xmod {

struct PlanCommandOptions {
  std::string cluster;      // profile YAML
  std::string calibration;  // CAL.json (optional)
  std::string format = "table";
  // predict
  std::string configs;
  // calibrate
  std::string measured;
  std::string out;
  // layout: the model and the job
  std::string family = "dense";
  std::string mlp = "gelu";
  int64_t d_model = 0, n_layers = 0, n_heads = 0, d_ff = 0, kv_heads = 0;
  int64_t vocab = 50257, seq_len = 2048;
  int64_t gpus = 8, global_batch = 0;
  std::string precision = "bf16";
  int top = 5;
  // co-design: xmod plan SWEEP
  std::string sweep;
  std::string db;
  double gpu_hours = 0;
  double context = 0;
  int64_t global_batch_tokens = 1 << 20;
  std::vector<int64_t> widths = {1024, 2048, 4096};
  int64_t aspect = 128;  // d_model / n_layers of the candidates
  int64_t top_k = 2;     // moe candidates' experts per token
  int bootstrap = 100;
  uint64_t seed = 0;
  std::string plot;          // SVG to draw (gnuplot), with its data and script beside it
  std::string csv;           // law points instead of a sweep (xmod fit --csv's format)
  std::string law = "moe";   // the law the CSV's columns are for
  bool extrapolate = false;  // answer for candidates far outside the fitted runs
};

absl::Status RunPlanPredict(const PlanCommandOptions& o, std::ostream& out);
absl::Status RunPlanCalibrate(const PlanCommandOptions& o, std::ostream& out);
absl::Status RunPlanLayout(const PlanCommandOptions& o, std::ostream& out);
absl::Status RunPlanSweep(const PlanCommandOptions& o, std::ostream& out);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_PLAN_COMMAND_H_
