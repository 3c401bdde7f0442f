// A cluster profile (docs/planner.md, "Cluster profiles"): the figures of one
// kind of accelerator and of the two tiers of network that join them, read from
// a YAML file named after the profile (clusters/h100-sxm.yaml), and the
// efficiency constants the performance model starts from before calibration.
#ifndef XMOD_ORCHESTRATOR_PLAN_CLUSTER_H_
#define XMOD_ORCHESTRATOR_PLAN_CLUSTER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace xmod {

// What the model does not measure but has to assume; a profile states them
// because they follow from the hardware (fused attention exists on these GPUs).
struct ClusterAssumptions {
  bool fused_attention = true;  // attention never materialises [heads, T, T] scores
  bool causal_skip = true;      // fused attention skips the masked half of a causal product
  // Bytes per element of the gradients the data-parallel group reduces (2: bf16,
  // as FSDP's and recent Megatron's defaults; 4: fp32 main gradients).
  double grad_reduce_bytes = 2.0;
  // Bytes per parameter of the training states: weights, gradients, optimizer
  // (Megatron's mixed precision: 2, 4 and 12; xmod's worker: 4, 4 and 8).
  double weight_bytes = 2.0, grad_bytes = 4.0, optimizer_bytes = 12.0;
};

// The constants calibration fits (docs/planner.md, "Calibration"). Every time is
// a size over a rate times one of these.
// The defaults are uncalibrated physical guesses (Calculon's large-GEMM and link
// efficiencies); a profile's `efficiency` section replaces them.
struct Efficiency {
  double gemm_max = 0.85;      // a large matrix multiplication's share of peak
  double gemm_half = 1.5e9;    // the FLOPs of one GEMM at which it reaches half of gemm_max
  double attention = 0.50;     // fused attention's share of peak
  double memory = 0.75;        // memory-bound kernels' share of HBM bandwidth
  double intra = 0.65;         // intra-node collectives' share of link bandwidth
  double inter = 0.90;         // inter-node collectives' share of link bandwidth
  double overlap_drag = 0.10;  // share of overlapped communication that still costs time
  double kernel_s = 4.0e-6;    // fixed cost of one kernel launch (host and GPU)
  // The recomputed forward's time as a share of the forward's: it writes no
  // activations for the backward and runs just before the backward that reads
  // its outputs (measured runs put it below 1).
  double recompute = 1.0;
  // Slow-down per unit of memory use above 85% of the device: allocator retries and
  // smaller workspaces, 1 + pressure · (use − 0.85)/0.15.
  double pressure = 0.0;
};

struct ClusterProfile {
  std::string name;            // from the file name: h100-sxm
  std::string device;          // "NVIDIA H100 SXM5 80GB"
  double peak_flops = 0;       // dense bf16 (or the precision's) FLOP/s per device
  double peak_flops_fp32 = 0;  // for precision fp32 (0: peak_flops)
  double hbm_bytes = 0;        // device memory
  double hbm_bandwidth = 0;    // bytes/s
  int64_t gpus_per_node = 8;
  double intra_bandwidth = 0;  // bytes/s per device per direction (NVLink)
  double intra_latency = 0;    // s
  double inter_bandwidth = 0;  // bytes/s per device per direction (InfiniBand/RoCE)
  double inter_latency = 0;
  ClusterAssumptions assumptions;
  Efficiency efficiency;  // before calibration
};

// Reads a profile. Errors name the file and, where there is one, the line and
// the field; a missing required figure or an unknown key is refused.
absl::StatusOr<ClusterProfile> LoadClusterProfile(const std::string& path);
absl::StatusOr<ClusterProfile> ParseClusterProfile(const std::string& text,
                                                   const std::string& name);

nlohmann::json EfficiencyToJson(const Efficiency& e);
// Reads a calibration's efficiencies (CAL.json's "efficiency" object); unknown
// keys are refused.
absl::StatusOr<Efficiency> EfficiencyFromJson(const nlohmann::json& j, const std::string& where);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_PLAN_CLUSTER_H_
