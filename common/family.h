// Model families as data: what the torch-free side of xmod (accounting, sizing,
// laws, reports) needs to know of a family, declared once per family in
// common/families/<name>.cc and listed in one table (family.cc). Code outside a
// family's files asks its traits (routing kind, extra parameters and FLOPs of its
// layers, evaluation) instead of comparing its name.
#ifndef XMOD_COMMON_FAMILY_H_
#define XMOD_COMMON_FAMILY_H_

#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xmod {

// A family's id in this process's registry. The built-in families have names
// for the code in their own files and for tests; a family registered at start-up
// (RegisterFamily: a plug-in, or a test's family) gets the next free value past
// them, so code outside a family's files treats the value as opaque and asks
// Traits().
enum class Family : int32_t { kDense, kXmod, kMod, kMoe, kDeco, kMol, kGdn };

struct ModelShape;  // accounting.h
struct JobFile;     // job_file.h

// How a family routes tokens.
enum class RoutingKind {
  kNone,     // every token through every layer's dense MLP
  kDepth,    // layers between anchors process only the tokens a router picks (X-MoD, MoD)
  kExperts,  // every token passes every layer; the MLP routes it to experts (moe, deco)
  kLayers,   // every layer is a split stage that routes each token to k thin blocks (mol)
};

// A run's routing fields as the read side (plots, reports, the dashboard) has them.
struct RunFields {
  double capacity = 1.0;
  int64_t stride = 1;
  int64_t experts = 0;
  int64_t top_k = 0;
  double sparsity = 0.0;  // the job's sparsity as stored (gdn: its share of DeltaNet layers)
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
  // Its blocks may be recomputed in the backward pass (train.recompute); not for
  // the expert families, mol and gdn yet.
  bool recomputes = true;
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
  // A family whose layers are not the standard block (mol, gdn): the parameters
  // of all n_layers layers (in long double, as expert_mlp_params), those one token
  // uses in them, and their forward FLOPs per token at the shape's context (the
  // routing sparsity is expert_sparsity's). Sums over the layers, so that layers
  // of different kinds (a hybrid's) count exactly; null: the standard block.
  long double (*layers_params)(const ModelShape&) = nullptr;
  double (*layers_active_params)(const ModelShape&) = nullptr;
  double (*layers_flops)(const ModelShape&) = nullptr;
  // N_active (accounting.h, ActiveParams); null: layers_active_params plus the
  // final norm where that hook is set, else the FLOP-equivalent dense size
  // N_dense(L0) · F_model / F_dense(L0).
  int64_t (*active_params)(const ModelShape&, int64_t dense_layers) = nullptr;
  // The family's options in the job file: one object under `options_key` (moe
  // and deco: "experts"; null: the family has none and the job file carries no
  // such key). `read_options` checks the object (errors name "job: field
  // 'KEY.x'") and keeps it in the job (JobFile::family_options), deriving what
  // the family's own accounting reads; `write_options` gives the object back for
  // CanonicalJson, so what it writes decides the job's id. Null hooks keep the
  // object as given (it must be a JSON object) and write it back unchanged.
  const char* options_key = nullptr;
  absl::Status (*read_options)(const nlohmann::json& object, JobFile* job) = nullptr;
  nlohmann::json (*write_options)(const JobFile& job) = nullptr;
  // How the plots, the tables and the dashboard show a run (FamilyLabel,
  // FamilySeries, FamilyPlotRank): its legend label and its series beside the
  // FLOP-matched dense run, from its routing fields; null: the family's name.
  // plot_rank orders the configurations of a plot (dense 0; registered families
  // after the built-in ones when it is 0).
  std::string (*label)(const RunFields& run) = nullptr;
  std::string (*series)(const RunFields& run) = nullptr;
  int plot_rank = 0;
};

// Every family, in the table's order (family.cc), then the registered ones. The
// elements never move, so a reference to one stays valid.
const std::deque<FamilyTraits>& Families();
// Adds a family to this process's registry and returns its id (traits.id is
// ignored). Call before any other thread reads the registry (at start-up). Fails
// when the name is taken or is not a lower-case identifier.
absl::StatusOr<Family> RegisterFamily(FamilyTraits traits);
// FamilyTraits::label, ::series and ::plot_rank of `family`, with their defaults.
std::string FamilyLabel(Family family, const RunFields& run);
std::string FamilySeries(Family family, const RunFields& run);
int FamilyPlotRank(Family family);
// The traits of `family`.
const FamilyTraits& Traits(Family family);

// "dense", "xmod", "mod", "moe", "deco", "mol".
std::string_view FamilyName(Family family);
// Inverse of FamilyName; INVALID_ARGUMENT naming the known families otherwise.
absl::StatusOr<Family> ParseFamily(std::string_view name);

}  // namespace xmod

#endif  // XMOD_COMMON_FAMILY_H_
