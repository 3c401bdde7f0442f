// Model families as data: what the torch-free side of xmod (accounting, sizing,
// laws, reports) needs to know of a family, declared once per family in
// common/families/<name>.cc and listed in one table (family.cc). Code outside a
// family's files asks its traits (routing kind, extra parameters and FLOPs of its
// layers, evaluation) instead of comparing its name.
#ifndef XMOD_COMMON_FAMILY_H_
#define XMOD_COMMON_FAMILY_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xmod {

enum class Family { kDense, kXmod, kMod, kMoe, kDeco };

struct ModelShape;  // accounting.h
struct JobFile;     // job_file.h

// How a family routes tokens.
enum class RoutingKind {
  kNone,     // every token through every layer's dense MLP
  kDepth,    // layers between anchors process only the tokens a router picks (X-MoD, MoD)
  kExperts,  // every token passes every layer; the MLP routes it to experts (moe, deco)
};

struct FamilyTraits {
  Family id = Family::kDense;
  std::string_view name;  // the sweep's and the job file's family name
  RoutingKind routing = RoutingKind::kNone;
  // Depth routing: a learnable gate γ per routed layer (one parameter) besides the
  // router.
  bool routed_gate = false;
  // Evaluated with causal (threshold) routing as well as top-k: the laws and plots
  // read its val_loss_causal.
  bool causal_eval = false;
  // Expert routing: one expert MLP (router, experts, shared experts, scales), in
  // long double so that a size check can count shapes past int64_t; its forward
  // matmul FLOPs per token as training executes them; the parameters one token
  // uses; the FLOPs per token inference saves against training over its
  // `expert_layers` expert layers (deco computes only its active experts then);
  // the expert sparsity (1 − k/E, ...).
  long double (*expert_mlp_params)(const ModelShape&) = nullptr;
  double (*expert_mlp_flops)(const ModelShape&) = nullptr;
  double (*expert_mlp_active_params)(const ModelShape&) = nullptr;
  double (*expert_inference_saving)(const ModelShape&, int64_t expert_layers) = nullptr;
  double (*expert_sparsity)(const ModelShape&) = nullptr;
  // The family's checks of a job file beyond the common ones (its experts, its
  // gate), as "job: field 'x' ..." errors; null: none.
  absl::Status (*check_job)(const JobFile& job) = nullptr;
  // N_active (accounting.h, ActiveParams); null: the FLOP-equivalent dense size
  // N_dense(L0) · F_model / F_dense(L0).
  int64_t (*active_params)(const ModelShape&, int64_t dense_layers) = nullptr;
};

// Every family, in the table's order (family.cc).
const std::vector<FamilyTraits>& Families();
// The traits of `family`.
const FamilyTraits& Traits(Family family);

// "dense", "xmod", "mod", "moe", "deco".
std::string_view FamilyName(Family family);
// Inverse of FamilyName; INVALID_ARGUMENT naming the known families otherwise, and
// saying so for the literature baseline that is not specified yet (mol).
absl::StatusOr<Family> ParseFamily(std::string_view name);

}  // namespace xmod

#endif  // XMOD_COMMON_FAMILY_H_
