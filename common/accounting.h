// Parameter and FLOP accounting for dense, X-MoD, MoD, top-k MoE and DECO decoders
// (docs/metrics.md, docs/baselines.md),
// and the sizing and budget arithmetic built on it. Torch-free: the orchestrator
// uses it to resolve jobs and the worker's tests check the modules against it.
//
// Conventions (all per token, forward pass, matmul FLOPs, as docs/metrics.md defines):
//   dense layer   2·(4d² + 3·d·d_ff) + 4·T·d
//   routed layer  ρ·2·(4d² + 3·d·d_ff) + ρ²·4·T·d + 2d,  ρ = k/T with k = max(1,
//   round(ρ_nominal·T)) output head   2·d·V
// Training FLOPs per token are three times the forward FLOPs. Parameters:
//   N_total  = every parameter except the token embedding and the output head
//              (attention, MLP, both RMSNorms of each layer, routers, gates, final norm);
//   N_active = N_dense(L0) · F_model / F_dense(L0), the FLOP-equivalent dense size.
// Expert layers (moe, deco) replace the MLP of a layer; their FLOPs are the matmuls
// as executed in training (docs/baselines.md):
//   moe layer MLP   2·d·E + 2·3·d·d_e·(k + K_s)        (router + routed + shared)
//   deco layer MLP  2·d·E + 2·2·d·E·d_e + 2·3·d·d_s    (every expert computed densely)
// All functions are pure and thread-safe.
#ifndef XMOD_COMMON_ACCOUNTING_H_
#define XMOD_COMMON_ACCOUNTING_H_

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/family.h"

namespace xmod {

// Families whose layers route tokens to experts inside the MLP (every token passes
// every layer): moe and deco.
inline bool IsExpertFamily(Family family) {
  return Traits(family).routing == RoutingKind::kExperts;
}

// A job is a dense run when its family is dense or, for the depth-routing families
// (xmod, mod), its anchor stride is 1 (every layer an anchor: nothing is routed). The one test of
// it for jobs; expansion rewrites such a point as the dense model, plots and laws read its top-k
// loss. (A law point also counts capacity 1 as dense: LawPoint::dense in fit/law.h.)
// Another family without routing (a registered one) is its own model, not the
// dense reference.
inline bool IsDenseRun(Family family, int64_t stride) {
  return family == Family::kDense || (Traits(family).routing == RoutingKind::kDepth && stride <= 1);
}
// The same for a family stored by name (an unknown name is not a dense run).
inline bool IsDenseRun(std::string_view family, int64_t stride) {
  const absl::StatusOr<Family> parsed = ParseFamily(family);
  return parsed.ok() && IsDenseRun(*parsed, stride);
}

// The expert layers of the moe and deco families. Zero everywhere for the others.
struct ExpertShape {
  int64_t experts = 0;        // E routed experts per expert layer
  int64_t top_k = 0;          // moe: routed experts per token (deco: 0, data-dependent)
  int64_t width = 0;          // d_e, hidden width of one routed expert
  int64_t shared = 0;         // moe: always-on SwiGLU experts of width d_e
  int64_t shared_width = 0;   // deco: hidden width d_s of its SwiGLU shared expert
  int64_t dense_layers = 0;   // leading layers that keep the dense MLP (deco: 1)
  double target_ratio = 0.0;  // deco: activation ratio the controller steers to
};

// Mixture of Layers (mol, docs/mol.md): every layer is a split stage of `blocks`
// thin blocks of width d_t behind down/up projections; the first `shared` run on
// every token, and each token is routed to `top_k` of the others. Thin blocks
// have the model's head width and a SwiGLU MLP of DefaultDff(d_t).
struct MolShape {
  int64_t thin_width = 0;       // d_t
  int64_t blocks = 0;           // N, shared and routed
  int64_t shared = 0;           // S
  int64_t top_k = 0;            // k of the N − S routed blocks
  bool routed_deltanet = true;  // routed blocks mix with Gated DeltaNet (false: softmax)
};

// The shape of one decoder, as the worker builds it.
struct ModelShape {
  Family family = Family::kDense;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_layers = 0;
  int64_t d_ff = 0;  // SwiGLU hidden width
  int64_t vocab_size = 0;
  int64_t context = 0;    // T, tokens per sequence
  int64_t stride = 1;     // anchor stride s: layer l is dense when l % s == 0
  double capacity = 1.0;  // nominal ρ = 1 − σ of routed layers
  ExpertShape experts;    // moe and deco only
  MolShape mol;           // mol only
  // gdn only: layer l keeps softmax attention when (l + 1) is a multiple of it,
  // every other layer mixes with Gated DeltaNet; 0: every layer does.
  int64_t softmax_every = 0;
};

// Whether layer `layer` of `shape` mixes tokens with softmax attention (every
// family's layers but a gdn model's Gated DeltaNet layers).
inline bool IsSoftmaxLayer(const ModelShape& shape, int64_t layer) {
  return shape.family != Family::kGdn ||
         (shape.softmax_every > 0 && (layer + 1) % shape.softmax_every == 0);
}

// DECO's default shared-expert width for an MLP of width d_ff:
// min(128, round_up(ceil(d_ff / 15), 8)), its 128 at its 0.1B scale.
inline int64_t DecoDefaultSharedWidth(int64_t d_ff) {
  return std::min<int64_t>(128, ((d_ff + 14) / 15 + 7) / 8 * 8);
}

// The MoE gate names a sweep or job file may give: softmax, pre_softmax, sigmoid.
inline bool IsMoeGateName(std::string_view name) {
  return name == "softmax" || name == "pre_softmax" || name == "sigmoid";
}

// True when layer `layer` of `shape` has an expert MLP (moe, deco).
inline bool IsExpertLayer(const ModelShape& shape, int64_t layer) {
  return IsExpertFamily(shape.family) && layer >= shape.experts.dense_layers;
}

// Bounds on the sizes a sweep may set (sweeps/README.md). Within them every
// count below fits an int64_t: CheckModelSize and BudgetTokens refuse the
// products that would not, before they are computed in integers.
//
// Counts (parameters, tokens, steps, intervals) are at most 2^53: the largest
// range in which every integer is exact as a double, which the FLOP and sizing
// arithmetic below and every JSON reader (the dashboard's JavaScript) rely on.
// 2^53 ≈ 9.0e15 is about 250 times the largest token budgets trained to date.
inline constexpr int64_t kMaxCount = int64_t{1} << 53;
// Where a refusal at a bound sends the reader.
inline constexpr char kBoundsDoc[] = "sweeps/README.md lists the bounds";
// d_model: 2^20, some 50 times the widest published models (~18k).
inline constexpr int64_t kMaxDModel = int64_t{1} << 20;
// d_ff and expert widths: 2^22, above DefaultDff(kMaxDModel).
inline constexpr int64_t kMaxHidden = int64_t{1} << 22;
// Layers, of a scale and of a FLOP-matched model (LayersMatchingFlops' search),
// and anchor strides.
inline constexpr int64_t kMaxLayers = 100000;
// Vocabulary: token files hold uint16 or uint32 ids (common/token_data.h).
inline constexpr int64_t kMaxVocab = int64_t{1} << 32;
// Context: 2^24 tokens per sequence.
inline constexpr int64_t kMaxContext = int64_t{1} << 24;
// Routed experts of a layer, experts per token, shared experts: 2^20 (PEER's
// million experts, He 2024).
inline constexpr int64_t kMaxExperts = int64_t{1} << 20;
// Tokens per optimizer step (and per micro-batch): 2^40, 10^4 times the largest
// published batches; expansion walks the divisors of the rows per rank.
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 40;
// Ranks of one worker group.
inline constexpr int64_t kMaxRanks = int64_t{1} << 20;

// Layers of `shape` with an expert MLP (0 unless its family routes to experts).
int64_t ExpertLayerCount(const ModelShape& shape);
// Parameters of one expert MLP (router, routed and shared experts, scales).
int64_t ExpertMlpParams(const ModelShape& shape);
// Forward matmul FLOPs per token of one expert MLP as training executes it.
double ExpertMlpFlops(const ModelShape& shape);
// Parameters one token uses in one expert MLP: moe: router, k routed and the shared
// experts; deco: router, the target fraction of the routed experts, the shared expert.
double ExpertMlpActiveParams(const ModelShape& shape);

// The three sparsity notions stored per job (docs/baselines.md):
//   parameter sparsity 1 − N_active/N_total over the non-embedding parameters;
//   expert sparsity    1 − k/E (moe), 1 − target ratio (deco), 0 otherwise;
//   token sparsity     1 − ρ of the routed layers (xmod, mod), 0 otherwise.
struct Sparsity {
  double parameter = 0.0;
  double expert = 0.0;
  double token = 0.0;
};
Sparsity SparsityOf(const ModelShape& shape, int64_t dense_layers);

// Forward FLOPs per token at inference, where a DECO layer computes only its active
// experts (the target fraction); equal to ForwardFlopsPerToken for other families.
double InferenceFlopsPerToken(const ModelShape& shape);

// The number of routed experts E >= max(1, top_k) of `shape` (its own count is
// ignored) whose non-embedding parameter count is closest to `target_params`; ties
// go to the smaller E. INVALID_ARGUMENT when even E = max(1, top_k) is more than
// twice the target.
absl::StatusOr<int64_t> ExpertsMatchingParams(const ModelShape& shape, int64_t target_params,
                                              int64_t max_experts = 100000);

// round_up(8/3 · d, 16), the SwiGLU width that keeps the MLP at 8d² parameters.
int64_t DefaultDff(int64_t d_model);

// True when layer `layer` (0-based) of a model with anchor stride `stride` is dense.
inline bool IsAnchorLayer(int64_t layer, int64_t stride) { return layer % stride == 0; }

// Number of routed layers; 0 for dense models.
int64_t NumRoutedLayers(const ModelShape& shape);

// Tokens a routed layer processes per sequence: max(1, round(capacity · context)).
int64_t RoutedTokens(double capacity, int64_t context);

// k / T: the capacity the routed layers really run at.
double EffectiveCapacity(const ModelShape& shape);

struct ParamCount {
  int64_t non_embedding = 0;  // N_total
  int64_t embedding = 0;      // token embedding, V·d
  int64_t head = 0;           // untied output head, d·V
  int64_t all() const { return non_embedding + embedding + head; }
};

// Exactly the parameters the worker's module holds for `shape`. Precondition:
// CheckModelSize(shape) is OK (beyond it the integers would wrap).
ParamCount CountParams(const ModelShape& shape);

// OK when every parameter count of `shape` (CountParams' parts and total, one
// expert MLP) is at most kMaxCount. The counts are computed in long double
// first, so a shape whose counts would wrap an int64_t is refused, never
// counted. INVALID_ARGUMENT saying how many parameters otherwise. Precondition:
// the shape's fields are non-negative.
absl::Status CheckModelSize(const ModelShape& shape);

// Forward matmul FLOPs per token (layers + head), as defined above.
double ForwardFlopsPerToken(const ModelShape& shape);

// Forward FLOPs per token when routed layer i (in layer order) processes the
// fraction per_routed_layer_capacity[i] of the tokens: a routed layer at capacity c
// costs c·2(4d² + 3·d·d_ff) + c²·4·T·d + 2d, anchors and head as above. Used to
// price the capacities threshold routing realises, which need not be k/T.
// Precondition: the vector holds NumRoutedLayers(shape) entries (a missing entry
// is charged at EffectiveCapacity, an extra one is ignored). At
// EffectiveCapacity for every layer this is ForwardFlopsPerToken(shape).
double ForwardFlopsPerTokenAt(const ModelShape& shape,
                              const std::vector<double>& per_routed_layer_capacity);

// 3 × ForwardFlopsPerToken.
double TrainFlopsPerToken(const ModelShape& shape);

// The dense model with the same width, heads, d_ff, vocabulary and context as
// `shape`, with `dense_layers` layers.
ModelShape DenseReference(const ModelShape& shape, int64_t dense_layers);

// For xmod and mod: N_dense(L0) · F_shape / F_dense(L0), rounded to the nearest
// integer. For moe: the parameters one token uses (attention, norms, router, k
// routed and the shared experts). For deco: N_total, since training computes every
// expert (its inference-time active count is SparsityOf().parameter's complement).
// For mol: the stages' shared, k routed blocks and routers, and the final norm.
int64_t ActiveParams(const ModelShape& shape, int64_t dense_layers);

// The layer count L ≥ 1 of `shape` (its own n_layers is ignored) whose forward
// FLOPs per token are closest to `target_flops`; ties go to the smaller L.
// INVALID_ARGUMENT when no L up to `max_layers` reaches half the target.
absl::StatusOr<int64_t> LayersMatchingFlops(const ModelShape& shape, double target_flops,
                                            int64_t max_layers = 100000);

enum class BudgetKind { kTokensPerParam, kFlops, kTokens };
std::string_view BudgetKindName(BudgetKind kind);  // "tokens_per_param", "flops", "tokens"

// Training tokens for a budget: r·N_active, C / training FLOPs per token, or D,
// rounded to the nearest token. INVALID_ARGUMENT ("gives 2.7e+22 tokens, ...")
// when that is not a whole number of tokens from 1 to kMaxCount: a budget
// never silently becomes another job.
absl::StatusOr<int64_t> BudgetTokens(BudgetKind kind, double value, int64_t n_active,
                                     double train_flops_per_token);

// ceil(tokens / batch_tokens). Precondition: batch_tokens > 0.
int64_t StepsFor(int64_t tokens, int64_t batch_tokens);

}  // namespace xmod

#endif  // XMOD_COMMON_ACCOUNTING_H_
