#include "common/accounting.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace xmod {

std::string_view FamilyName(Family family) {
  switch (family) {
    case Family::kDense:
      return "dense";
    case Family::kXmod:
      return "xmod";
    case Family::kMod:
      return "mod";
  }
  return "unknown";
}

absl::StatusOr<Family> ParseFamily(std::string_view name) {
  if (name == "dense") return Family::kDense;
  if (name == "xmod") return Family::kXmod;
  if (name == "mod") return Family::kMod;
  if (name == "moe" || name == "deco" || name == "mol") {
    return absl::InvalidArgumentError(absl::StrCat(
        "family '", std::string(name), "' is not specified yet (known: dense, xmod, mod)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown family '", std::string(name), "' (known: dense, xmod, mod)"));
}

int64_t DefaultDff(int64_t d_model) {
  // ceil(8d/3) rounded up to a multiple of 16, in integers to avoid float edges.
  const int64_t raw = (8 * d_model + 2) / 3;
  return (raw + 15) / 16 * 16;
}

int64_t NumRoutedLayers(const ModelShape& shape) {
  if (shape.family == Family::kDense || shape.stride <= 1) return 0;
  const int64_t anchors = (shape.n_layers + shape.stride - 1) / shape.stride;
  return shape.n_layers - anchors;
}

int64_t RoutedTokens(double capacity, int64_t context) {
  return std::max<int64_t>(1, std::llround(capacity * static_cast<double>(context)));
}

double EffectiveCapacity(const ModelShape& shape) {
  if (NumRoutedLayers(shape) == 0) return 1.0;
  return static_cast<double>(RoutedTokens(shape.capacity, shape.context)) /
         static_cast<double>(shape.context);
}

namespace {

// Attention (q, k, v, o) and SwiGLU MLP weights of one layer.
int64_t LayerMatmulParams(const ModelShape& s) {
  return 4 * s.d_model * s.d_model + 3 * s.d_model * s.d_ff;
}

}  // namespace

ParamCount CountParams(const ModelShape& s) {
  const int64_t routed = NumRoutedLayers(s);
  const int64_t per_layer = LayerMatmulParams(s) + 2 * s.d_model;  // + two RMSNorm weights
  // Routers are d→1 linears without bias; X-MoD adds one learnable gate γ per routed layer.
  const int64_t per_routed_extra = s.d_model + (s.family == Family::kXmod ? 1 : 0);
  ParamCount count;
  count.non_embedding = s.n_layers * per_layer + routed * per_routed_extra + s.d_model;
  count.embedding = s.vocab_size * s.d_model;
  count.head = s.d_model * s.vocab_size;
  return count;
}

double ForwardFlopsPerToken(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const double t = static_cast<double>(s.context);
  const double matmul = 2.0 * static_cast<double>(LayerMatmulParams(s));
  const double attention = 4.0 * t * d;
  const int64_t routed = NumRoutedLayers(s);
  const double rho = EffectiveCapacity(s);
  const double dense_layer = matmul + attention;
  const double routed_layer = rho * matmul + rho * rho * attention + 2.0 * d;
  return static_cast<double>(s.n_layers - routed) * dense_layer +
         static_cast<double>(routed) * routed_layer + 2.0 * d * static_cast<double>(s.vocab_size);
}

double ForwardFlopsPerTokenAt(const ModelShape& s,
                              const std::vector<double>& per_routed_layer_capacity) {
  const double d = static_cast<double>(s.d_model);
  const double t = static_cast<double>(s.context);
  const double matmul = 2.0 * static_cast<double>(LayerMatmulParams(s));
  const double attention = 4.0 * t * d;
  const int64_t routed = NumRoutedLayers(s);
  double routed_flops = 0.0;
  for (int64_t i = 0; i < routed; ++i) {
    const double c = i < static_cast<int64_t>(per_routed_layer_capacity.size())
                         ? per_routed_layer_capacity[static_cast<size_t>(i)]
                         : EffectiveCapacity(s);
    routed_flops += c * matmul + c * c * attention + 2.0 * d;
  }
  return static_cast<double>(s.n_layers - routed) * (matmul + attention) + routed_flops +
         2.0 * d * static_cast<double>(s.vocab_size);
}

double TrainFlopsPerToken(const ModelShape& shape) { return 3.0 * ForwardFlopsPerToken(shape); }

ModelShape DenseReference(const ModelShape& shape, int64_t dense_layers) {
  ModelShape dense = shape;
  dense.family = Family::kDense;
  dense.n_layers = dense_layers;
  dense.stride = 1;
  dense.capacity = 1.0;
  return dense;
}

int64_t ActiveParams(const ModelShape& shape, int64_t dense_layers) {
  const ModelShape dense = DenseReference(shape, dense_layers);
  const double n_dense = static_cast<double>(CountParams(dense).non_embedding);
  return std::llround(n_dense * ForwardFlopsPerToken(shape) / ForwardFlopsPerToken(dense));
}

absl::StatusOr<int64_t> LayersMatchingFlops(const ModelShape& shape, double target_flops,
                                            int64_t max_layers) {
  ModelShape s = shape;
  double previous = 0.0;
  // Forward FLOPs grow with every added layer, so walk up until the target is passed.
  for (int64_t layers = 1; layers <= max_layers; ++layers) {
    s.n_layers = layers;
    const double flops = ForwardFlopsPerToken(s);
    if (flops >= target_flops) {
      if (layers > 1 && target_flops - previous <= flops - target_flops) return layers - 1;
      return layers;
    }
    previous = flops;
  }
  if (previous >= 0.5 * target_flops) return max_layers;
  return absl::InvalidArgumentError(absl::StrCat("no layer count up to ", max_layers,
                                                 " reaches the target of ", target_flops,
                                                 " FLOPs per token"));
}

std::string_view BudgetKindName(BudgetKind kind) {
  switch (kind) {
    case BudgetKind::kTokensPerParam:
      return "tokens_per_param";
    case BudgetKind::kFlops:
      return "flops";
    case BudgetKind::kTokens:
      return "tokens";
  }
  return "unknown";
}

int64_t BudgetTokens(BudgetKind kind, double value, int64_t n_active,
                     double train_flops_per_token) {
  double tokens = 0.0;
  switch (kind) {
    case BudgetKind::kTokensPerParam:
      tokens = value * static_cast<double>(n_active);
      break;
    case BudgetKind::kFlops:
      tokens = value / train_flops_per_token;
      break;
    case BudgetKind::kTokens:
      tokens = value;
      break;
  }
  return std::max<int64_t>(1, std::llround(tokens));
}

int64_t StepsFor(int64_t tokens, int64_t batch_tokens) {
  return (tokens + batch_tokens - 1) / batch_tokens;
}

}  // namespace xmod
