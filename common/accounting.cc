#include "common/accounting.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace xmod {

int64_t DefaultDff(int64_t d_model) {
  // ceil(8d/3) rounded up to a multiple of 16, in integers to avoid float edges.
  const int64_t raw = (8 * d_model + 2) / 3;
  return (raw + 15) / 16 * 16;
}

int64_t NumRoutedLayers(const ModelShape& shape) {
  if (Traits(shape.family).routing != RoutingKind::kDepth || shape.stride <= 1) return 0;
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

// Attention (q, k, v, o) and SwiGLU MLP weights of one layer, over a number type
// (CountParamsAs below says why).
template <typename T>
T LayerMatmulParamsAs(const ModelShape& s) {
  const T d = static_cast<T>(s.d_model);
  return 4 * d * d + 3 * d * static_cast<T>(s.d_ff);
}

int64_t LayerMatmulParams(const ModelShape& s) { return LayerMatmulParamsAs<int64_t>(s); }

}  // namespace

int64_t ExpertLayerCount(const ModelShape& s) {
  if (!IsExpertFamily(s.family)) return 0;
  return std::max<int64_t>(0, s.n_layers - s.experts.dense_layers);
}

namespace {

// The parameter formulas over a number type: int64_t for the counts, long double
// (which cannot overflow here) for CheckModelSize. Integers up to 2^64 are exact
// in both, so the two agree wherever the check passes.
// One expert MLP's parameters (the family's formula, in long double) as T.
template <typename T>
T ExpertMlpParamsAs(const ModelShape& s) {
  const FamilyTraits& traits = Traits(s.family);
  if (traits.expert_mlp_params == nullptr) return 0;
  return static_cast<T>(traits.expert_mlp_params(s));
}

template <typename T>
struct ParamCountAs {
  T non_embedding = 0;
  T embedding = 0;
  T head = 0;
};

template <typename T>
ParamCountAs<T> CountParamsAs(const ModelShape& s) {
  const T d = static_cast<T>(s.d_model);
  const T routed = static_cast<T>(NumRoutedLayers(s));
  const T per_layer = LayerMatmulParamsAs<T>(s) + 2 * d;  // + two RMSNorm weights
  // Routers are d→1 linears without bias; X-MoD adds one learnable gate γ per routed layer.
  const T per_routed_extra = d + (Traits(s.family).routed_gate ? 1 : 0);
  // An expert layer holds its expert MLP instead of the dense one.
  const T expert_layers = static_cast<T>(ExpertLayerCount(s));
  const T per_expert_extra =
      expert_layers > 0 ? ExpertMlpParamsAs<T>(s) - 3 * d * static_cast<T>(s.d_ff) : T{0};
  ParamCountAs<T> count;
  const FamilyTraits& traits = Traits(s.family);
  if (traits.layers_params != nullptr) {
    count.non_embedding = static_cast<T>(traits.layers_params(s)) + d;
  } else {
    count.non_embedding = static_cast<T>(s.n_layers) * per_layer + routed * per_routed_extra +
                          expert_layers * per_expert_extra + d;
  }
  count.embedding = static_cast<T>(s.vocab_size) * d;
  count.head = d * static_cast<T>(s.vocab_size);
  return count;
}

}  // namespace

int64_t ExpertMlpParams(const ModelShape& s) { return ExpertMlpParamsAs<int64_t>(s); }

double ExpertMlpFlops(const ModelShape& s) {
  const FamilyTraits& traits = Traits(s.family);
  return traits.expert_mlp_flops != nullptr ? traits.expert_mlp_flops(s) : 0.0;
}

double ExpertMlpActiveParams(const ModelShape& s) {
  const FamilyTraits& traits = Traits(s.family);
  return traits.expert_mlp_active_params != nullptr ? traits.expert_mlp_active_params(s) : 0.0;
}

ParamCount CountParams(const ModelShape& s) {
  const ParamCountAs<int64_t> count = CountParamsAs<int64_t>(s);
  return ParamCount{count.non_embedding, count.embedding, count.head};
}

absl::Status CheckModelSize(const ModelShape& s) {
  const ParamCountAs<long double> count = CountParamsAs<long double>(s);
  const long double total = count.non_embedding + count.embedding + count.head;
  const long double limit = static_cast<long double>(kMaxCount);
  if (total <= limit && ExpertMlpParamsAs<long double>(s) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the model would have ", static_cast<double>(count.non_embedding),
                   " parameters besides ", static_cast<double>(count.embedding + count.head),
                   " in its embedding and head, more than 2^53 = ", kMaxCount,
                   " in all (the most a count may be; sweeps/README.md)"));
}

double ForwardFlopsPerToken(const ModelShape& s) {
  const double d = static_cast<double>(s.d_model);
  const FamilyTraits& traits = Traits(s.family);
  if (traits.layers_flops != nullptr) {
    return traits.layers_flops(s) + 2.0 * d * static_cast<double>(s.vocab_size);
  }
  const double t = static_cast<double>(s.context);
  const double matmul = 2.0 * static_cast<double>(LayerMatmulParams(s));
  const double attention = 4.0 * t * d;
  const int64_t routed = NumRoutedLayers(s);
  const double rho = EffectiveCapacity(s);
  const double dense_layer = matmul + attention;
  const double routed_layer = rho * matmul + rho * rho * attention + 2.0 * d;
  const int64_t expert_layers = ExpertLayerCount(s);
  const double expert_extra =
      expert_layers > 0 ? ExpertMlpFlops(s) - 6.0 * d * static_cast<double>(s.d_ff) : 0.0;
  return static_cast<double>(s.n_layers - routed) * dense_layer +
         static_cast<double>(routed) * routed_layer +
         static_cast<double>(expert_layers) * expert_extra +
         2.0 * d * static_cast<double>(s.vocab_size);
}

double InferenceFlopsPerToken(const ModelShape& s) {
  const FamilyTraits& traits = Traits(s.family);
  if (traits.expert_inference_saving == nullptr) return ForwardFlopsPerToken(s);
  return ForwardFlopsPerToken(s) - traits.expert_inference_saving(s, ExpertLayerCount(s));
}

Sparsity SparsityOf(const ModelShape& s, int64_t dense_layers) {
  Sparsity out;
  const double total = static_cast<double>(CountParams(s).non_embedding);
  const int64_t expert_layers = ExpertLayerCount(s);
  const FamilyTraits& traits = Traits(s.family);
  if (traits.layers_active_params != nullptr && total > 0.0) {
    out.parameter = 1.0 - static_cast<double>(ActiveParams(s, dense_layers)) / total;
    out.expert = traits.expert_sparsity != nullptr ? traits.expert_sparsity(s) : 0.0;
  } else if (expert_layers > 0 && total > 0.0) {
    const double saved = static_cast<double>(expert_layers) *
                         (static_cast<double>(ExpertMlpParams(s)) - ExpertMlpActiveParams(s));
    out.parameter = saved / total;
    out.expert = traits.expert_sparsity != nullptr ? traits.expert_sparsity(s) : 0.0;
  } else if (NumRoutedLayers(s) > 0 && total > 0.0) {
    out.parameter = 1.0 - static_cast<double>(ActiveParams(s, dense_layers)) / total;
    out.token = 1.0 - EffectiveCapacity(s);
  }
  return out;
}

absl::StatusOr<int64_t> ExpertsMatchingParams(const ModelShape& shape, int64_t target_params,
                                              int64_t max_experts) {
  ModelShape s = shape;
  const int64_t first = std::max<int64_t>(1, s.experts.top_k);
  const double target = static_cast<double>(target_params);
  double previous = 0.0;
  // Parameters grow with every added expert, so walk up until the target is passed.
  for (int64_t e = first; e <= max_experts; ++e) {
    s.experts.experts = e;
    // In long double: a count past the target may be past what an int64_t holds.
    const double n = static_cast<double>(CountParamsAs<long double>(s).non_embedding);
    if (e == first && n > 2.0 * target) break;
    if (n >= target) {
      if (e > first && target - previous <= n - target) return e - 1;
      return e;
    }
    previous = n;
  }
  if (previous > 0.0 && previous >= 0.5 * target) return max_experts;
  return absl::InvalidArgumentError(absl::StrCat("no expert count from ", first, " to ",
                                                 max_experts, " comes within a factor of 2 of ",
                                                 target_params, " parameters"));
}

double ForwardFlopsPerTokenAt(const ModelShape& s,
                              const std::vector<double>& per_routed_layer_capacity) {
  if (Traits(s.family).layers_flops != nullptr) return ForwardFlopsPerToken(s);
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
  dense.experts = ExpertShape{};
  return dense;
}

int64_t ActiveParams(const ModelShape& shape, int64_t dense_layers) {
  const FamilyTraits& traits = Traits(shape.family);
  if (traits.active_params != nullptr) return traits.active_params(shape, dense_layers);
  if (traits.layers_active_params != nullptr) {
    return std::llround(traits.layers_active_params(shape) +
                        static_cast<double>(shape.d_model));  // + the final norm
  }
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

absl::StatusOr<int64_t> BudgetTokens(BudgetKind kind, double value, int64_t n_active,
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
  // Compared before rounding: llround of a value past INT64_MAX is unspecified
  // (on x86 INT64_MIN, which the old clamp to 1 made a 1-token job).
  if (!(tokens >= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gives ", tokens, " tokens, less than one; a job trains at least one token"));
  }
  if (!(tokens <= static_cast<double>(kMaxCount))) {
    return absl::InvalidArgumentError(absl::StrCat("gives ", tokens,
                                                   " tokens, more than 2^53 = ", kMaxCount,
                                                   " (the most a count may be; sweeps/README.md)"));
  }
  return std::llround(tokens);
}

int64_t StepsFor(int64_t tokens, int64_t batch_tokens) {
  return (tokens + batch_tokens - 1) / batch_tokens;
}

}  // namespace xmod
