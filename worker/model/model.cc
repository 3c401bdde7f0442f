#include "worker/model/model.h"

#include <torch/version.h>

#include <atomic>
#include <cmath>
#include <optional>

#include "worker/model/fused_cpu.h"
#include "worker/model/precision.h"

#if TORCH_VERSION_MAJOR >= 2
#define XMOD_HAVE_SDPA 1
#else
#define XMOD_HAVE_SDPA 0
#endif

namespace xmod {

namespace F = torch::nn::functional;

namespace {
std::atomic<AttentionPath> g_attention_path{AttentionPath::kAuto};
}  // namespace

bool HaveFusedAttention() { return XMOD_HAVE_SDPA != 0; }

void SetAttentionPath(AttentionPath path) {
  TORCH_CHECK(path != AttentionPath::kFused || HaveFusedAttention(),
              "fused attention needs LibTorch 2.0 or later; this is ", TORCH_VERSION);
  g_attention_path = path;
}

AttentionPath CurrentAttentionPath() { return g_attention_path; }

AttentionPath ResolvedAttentionPath(const torch::Device& device) {
  const AttentionPath path = g_attention_path;
  if (path != AttentionPath::kAuto) return path;
  if (!HaveFusedAttention()) return AttentionPath::kEager;
  return device.is_cpu() && AutocastEnabled(device) ? AttentionPath::kEager : AttentionPath::kFused;
}

const char* AttentionPathName(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto:
      return "auto";
    case AttentionPath::kFused:
      return "fused";
    case AttentionPath::kEager:
      return "eager";
  }
  return "?";
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return RmsNorm(x, weight, eps_); }

AttentionImpl::AttentionImpl(int64_t d_model, int64_t n_heads) : n_heads_(n_heads) {
  qkv = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(d_model, 3 * d_model).bias(false)));
  proj = register_module("proj",
                         torch::nn::Linear(torch::nn::LinearOptions(d_model, d_model).bias(false)));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& allowed) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  const int64_t hd = d / n_heads_;
  // [B, N, 3d] -> 3 x [B, H, N, hd], q and k rotated
  auto parts = SplitRotary(qkv(x), cos, sin, n_heads_);
  const torch::Tensor& q = parts[0];
  const torch::Tensor& k = parts[1];
  torch::Tensor out;  // [B, H, N, hd]
#if XMOD_HAVE_SDPA
  if (ResolvedAttentionPath(x.device()) == AttentionPath::kFused) {
    // Tokens come in increasing position order, so causal is the plain lower
    // triangle; a boolean mask is true where attending is allowed, as `allowed`.
    out = allowed.defined() ? at::scaled_dot_product_attention(q, k, parts[2], allowed)
                            : at::scaled_dot_product_attention(q, k, parts[2], {}, 0.0,
                                                               /*is_causal=*/true);
  }
#endif
  if (!out.defined()) {
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    if (allowed.defined()) {
      scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    } else {
      // Tokens come in increasing position order, so causal means j <= i.
      const torch::Tensor future =
          torch::ones({n, n}, torch::dtype(torch::kBool).device(x.device())).triu(1);
      scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    }
    out = torch::matmul(torch::softmax(scores, -1), parts[2]);
  }
  return proj(out.transpose(1, 2).reshape({b, n, d}));
}

void BlockImpl::Common(int64_t d_model, int64_t n_heads) {
  norm1 = register_module("norm1", RMSNorm(d_model));
  attn = register_module("attn", Attention(d_model, n_heads));
  norm2 = register_module("norm2", RMSNorm(d_model));
}

BlockImpl::BlockImpl(int64_t d_model, int64_t n_heads, int64_t d_ff) {
  Common(d_model, n_heads);
  mlp = register_module("mlp", Mlp(d_model, d_ff));
}

BlockImpl::BlockImpl(int64_t d_model, int64_t n_heads, MoeMlp moe_mlp) {
  Common(d_model, n_heads);
  moe = register_module("mlp", std::move(moe_mlp));
}

BlockImpl::BlockImpl(int64_t d_model, int64_t n_heads, DecoMlp deco_mlp) {
  Common(d_model, n_heads);
  deco = register_module("mlp", std::move(deco_mlp));
}

torch::Tensor BlockImpl::Delta(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& allowed,
                               ExpertStats* stats) {
  const torch::Tensor a = attn(norm1(x), cos, sin, allowed);
  const torch::Tensor h = norm2(x + a);
  if (!moe.is_empty()) return a + moe->forward(h, stats);
  if (!deco.is_empty()) return a + deco->forward(h, stats);
  return a + mlp(h);
}

namespace {

// The autograd function behind RecomputedDelta. Inputs: the block (by pointer,
// not a tensor), x, cos, sin, allowed (may be undefined), then the block's
// parameters, so that their gradients flow through this node's edges.
class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, BlockImpl* block,
                               const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin,
                               const c10::optional<torch::Tensor>& allowed,
                               torch::TensorList params) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["autocast"] = AutocastEnabled(x.device());
    ctx->saved_data["params"] = static_cast<int64_t>(params.size());
    const torch::Tensor mask = allowed.has_value() ? *allowed : torch::Tensor();
    ctx->saved_data["masked"] = mask.defined();
    if (mask.defined()) {
      ctx->save_for_backward({x, cos, sin, mask});
    } else {
      ctx->save_for_backward({x, cos, sin});
    }
    // Autograd is off here (Function::apply records this node instead).
    return block->Delta(x, cos, sin, mask);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* block = reinterpret_cast<BlockImpl*>(ctx->saved_data["block"].toInt());
    const bool autocast = ctx->saved_data["autocast"].toBool();
    const int64_t n_params = ctx->saved_data["params"].toInt();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor x = saved[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> inputs = {x};
    for (const auto& p : block->parameters()) inputs.push_back(p);
    TORCH_CHECK(static_cast<int64_t>(inputs.size()) == n_params + 1,
                "recompute: the block's parameters changed between forward and backward");
    torch::autograd::variable_list grads;
    {
      torch::AutoGradMode grad_on(true);
      Autocast amp(x.device(), autocast);
      const torch::Tensor mask = ctx->saved_data["masked"].toBool() ? saved[3] : torch::Tensor();
      const torch::Tensor y = block->Delta(x, saved[1], saved[2], mask);
      grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    // One entry per forward input: block, x, cos, sin, allowed, then each parameter.
    torch::autograd::variable_list out = {torch::Tensor(), grads[0], torch::Tensor(),
                                          torch::Tensor(), torch::Tensor()};
    for (int64_t i = 0; i < n_params; ++i) out.push_back(grads[1 + i]);
    return out;
  }
};

}  // namespace

torch::Tensor RecomputedDelta(BlockImpl& block, const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin, const torch::Tensor& allowed) {
  if (!torch::GradMode::is_enabled()) return block.Delta(x, cos, sin, allowed);
  const std::vector<torch::Tensor> params = block.parameters();
  // As a TensorList, so that autograd sees each parameter as an input.
  const c10::optional<torch::Tensor> mask =
      allowed.defined() ? c10::optional<torch::Tensor>(allowed) : c10::nullopt;
  return RecomputeFunction::apply(&block, x, cos, sin, mask, torch::TensorList(params));
}

LayerImpl::LayerImpl(const DecoderOptions& o, int64_t index) {
  const ExpertShape& e = o.experts();
  if (o.IsExpertLayer(index) && o.family() == Family::kMoe) {
    block = register_module("block",
                            Block(o.d_model(), o.n_heads(),
                                  MoeMlp(MoeMlpOptions(o.d_model(), e.experts, e.top_k, e.width)
                                             .shared(e.shared)
                                             .gate(o.moe_gate())
                                             .capacity_factor(o.capacity_factor()))));
  } else if (o.IsExpertLayer(index)) {
    block = register_module(
        "block", Block(o.d_model(), o.n_heads(),
                       DecoMlp(DecoMlpOptions(o.d_model(), e.experts, e.width, e.shared_width))));
  } else {
    block = register_module("block", Block(o.d_model(), o.n_heads(), o.d_ff()));
  }
  if (o.IsRouted(index)) {
    router = register_module(
        "router", torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), 1).bias(false)));
    if (o.family() == Family::kXmod) {
      gamma = register_parameter("gamma", torch::ones({1}));
      gate_scale = 1.0 / std::sqrt(static_cast<double>(o.stride() - 1));
    }
  }
}

DecoderImpl::DecoderImpl(DecoderOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  tok_emb = register_module("tok_emb", torch::nn::Embedding(o.vocab_size(), o.d_model()));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < o.n_layers(); ++l) layers->push_back(Layer(o, l));
  norm = register_module("norm", RMSNorm(o.d_model()));
  head = register_module(
      "head", torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), o.vocab_size()).bias(false)));
  const int64_t half = o.d_model() / o.n_heads() / 2;
  const torch::Tensor inv_freq =
      torch::pow(o.rope_theta(), -torch::arange(half, torch::kFloat64) / double(half));
  const torch::Tensor angles =
      torch::outer(torch::arange(o.context(), torch::kFloat64), inv_freq);  // [T, half]
  rope_cos_ = register_buffer("rope_cos", angles.cos().to(torch::kFloat32));
  rope_sin_ = register_buffer("rope_sin", angles.sin().to(torch::kFloat32));
  if (o.family() == Family::kDeco) {
    entropy_coef_ =
        register_buffer("entropy_coef", torch::full({}, o.entropy_init(), torch::kFloat64));
  }
  // Recomputation replays a block in a custom autograd function whose forward runs
  // without autograd; the expert losses computed there would carry no gradient.
  TORCH_CHECK(!(o.recompute() && IsExpertFamily(o.family())),
              "recompute is not available for the expert families (moe, deco)");
  reset_parameters();
}

double DecoderImpl::entropy_coef() const {
  return entropy_coef_.defined() ? entropy_coef_.item<double>() : 0.0;
}

void DecoderImpl::UpdateEntropyCoef(double ratio) {
  if (!entropy_coef_.defined()) return;
  torch::NoGradGuard no_grad;
  const double c = entropy_coef_.item<double>();
  const double m = options_.entropy_multiplier();
  const double next =
      ratio > options_.experts().target_ratio ? c * m : std::max(c / m, options_.entropy_init());
  entropy_coef_.fill_(next);
}

std::vector<MoeMlp> DecoderImpl::MoeLayers() const {
  std::vector<MoeMlp> out;
  for (const auto& module : *layers) {
    auto layer = std::dynamic_pointer_cast<LayerImpl>(module);
    if (!layer->block->moe.is_empty()) out.push_back(layer->block->moe);
  }
  return out;
}

void DecoderImpl::UpdateExpertBias(const torch::Tensor& routed, double rate) {
  std::vector<MoeMlp> moe = MoeLayers();
  TORCH_CHECK(routed.size(0) == static_cast<int64_t>(moe.size()),
              "expert bias: one row of loads per expert layer");
  for (size_t i = 0; i < moe.size(); ++i) moe[i]->UpdateBias(routed[int64_t(i)], rate);
}

double InitDepth(const DecoderOptions& o) {
  int64_t anchors = 0, routed = 0;
  for (int64_t l = 0; l < o.n_layers(); ++l) (o.IsRouted(l) ? routed : anchors) += 1;
  if (o.family() != Family::kXmod || routed == 0) return static_cast<double>(o.n_layers());
  return static_cast<double>(anchors) +
         static_cast<double>(routed) / static_cast<double>(o.stride() - 1);
}

void DecoderImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double std = options_.init_std();
  const double out_std = std / std::sqrt(2.0 * InitDepth(options_));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos) {
      p.fill_(1.0);
    } else if (name.find("gamma") != std::string::npos) {
      p.fill_(1.0);
    } else if (name.find("expert_scale") != std::string::npos) {
      p.fill_(kDecoScaleInit);
    } else if (name.find("proj") != std::string::npos || name.find(".w2") != std::string::npos ||
               name.find(".down.") != std::string::npos) {
      p.normal_(0.0, out_std);
    } else {
      p.normal_(0.0, std);
    }
  }
}

DecoderOutput DecoderImpl::forward(const torch::Tensor& tokens, Routing routing) {
  const auto& o = options_;
  const int64_t b = tokens.size(0), t = tokens.size(1), d = o.d_model();
  TORCH_CHECK(t <= o.context(), "sequence of ", t, " tokens exceeds the context ", o.context());
  const torch::Tensor cos = rope_cos_.narrow(0, 0, t).unsqueeze(0);  // [1, T, half]
  const torch::Tensor sin = rope_sin_.narrow(0, 0, t).unsqueeze(0);
  const int64_t half = cos.size(-1);
  // A sequence shorter than the context keeps the trained capacity ρ = k / context.
  const int64_t k = std::max<int64_t>(
      1, std::min<int64_t>(t, std::llround(double(o.routed_tokens()) * t / o.context())));
  const double rho = double(k) / double(t);

  torch::Tensor x = tok_emb(tokens);
  std::vector<torch::Tensor> router_probs;   // sigmoid(r) per routed layer, [B, T]
  std::vector<torch::Tensor> router_logits;  // r per routed layer, [B, T], fp32, detached
  torch::Tensor router_loss = torch::zeros({}, x.options());
  torch::Tensor layers_used = torch::zeros({b, t}, x.options());
  int64_t routed_layers = 0;
  std::vector<torch::Tensor> routed_counts;  // per routed layer, scalar float64
  torch::Tensor causal;  // threshold routing: causal mask [1, 1, T, T], built on first use
  const auto BlockDelta = [&](BlockImpl& block, const torch::Tensor& in, const torch::Tensor& c,
                              const torch::Tensor& s, const torch::Tensor& allowed = {}) {
    return o.recompute() ? RecomputedDelta(block, in, c, s, allowed)
                         : block.Delta(in, c, s, allowed);
  };

  std::vector<ExpertStats> expert_stats;
  for (const auto& module : *layers) {
    auto layer = std::dynamic_pointer_cast<LayerImpl>(module);
    if (!layer->block->moe.is_empty() || !layer->block->deco.is_empty()) {
      expert_stats.emplace_back();
      x = x + layer->block->Delta(x, cos, sin, {}, &expert_stats.back());
      layers_used = layers_used + 1.0;
      continue;
    }
    if (!layer->routed()) {
      x = x + BlockDelta(*layer->block, x, cos, sin);
      layers_used = layers_used + 1.0;
      continue;
    }
    ++routed_layers;
    // The router, the routing decision and its losses are an fp32 island of a
    // bf16 autocast region: near-ties must be broken as in fp32.
    std::optional<AutocastOff> fp32_router(std::in_place, x.device());
    const torch::Tensor r = layer->router(x.to(torch::kFloat32)).squeeze(-1);  // [B, T], fp32
    const torch::Tensor gate_scale =
        layer->gamma.defined() ? layer->gamma * layer->gate_scale : torch::ones({1}, x.options());
    router_probs.push_back(torch::sigmoid(r));
    router_logits.push_back(r.detach());
    if (routing == Routing::kTopK) {
      // Top-k per sequence, re-sorted by position so that causal order is kept.
      const torch::Tensor idx = std::get<0>(std::get<1>(r.topk(k, -1)).sort(-1));  // [B, k]
      const torch::Tensor weight = torch::sigmoid(r.gather(1, idx)) * gate_scale;  // [B, k]
      const torch::Tensor chosen = torch::zeros({b, t}, r.options()).scatter(1, idx, 1.0);
      router_loss = router_loss + F::binary_cross_entropy_with_logits(r, chosen);
      fp32_router.reset();
      const torch::Tensor idx_d = idx.unsqueeze(-1).expand({b, k, d});
      const torch::Tensor x_sel = x.gather(1, idx_d);  // [B, k, d]
      const torch::Tensor flat = idx.reshape({-1});
      const torch::Tensor cos_sel = cos[0].index_select(0, flat).view({b, k, half});
      const torch::Tensor sin_sel = sin[0].index_select(0, flat).view({b, k, half});
      const torch::Tensor delta = BlockDelta(*layer->block, x_sel, cos_sel, sin_sel);  // [B, k, d]
      x = x.scatter_add(1, idx_d, weight.unsqueeze(-1).to(x.dtype()) * delta);
      layers_used = layers_used + chosen;
      routed_counts.push_back(
          torch::full({}, double(b * k), torch::dtype(torch::kFloat64).device(x.device())));
    } else {
      // Each token decides alone (r > 0): keys are the chosen tokens up to the query
      // (plus itself, so that an unchosen query has a defined, discarded output).
      const torch::Tensor chosen = r > 0;                                                  // [B, T]
      const torch::Tensor weight = torch::sigmoid(r) * gate_scale * chosen.to(r.dtype());  // [B, T]
      router_loss = router_loss + F::binary_cross_entropy_with_logits(r, chosen.to(r.dtype()));
      fp32_router.reset();
      if (!causal.defined()) {
        causal = torch::ones({t, t}, torch::dtype(torch::kBool).device(x.device())).tril();
      }
      const torch::Tensor eye = torch::eye(t, torch::dtype(torch::kBool).device(x.device()));
      const torch::Tensor allowed =
          (causal & chosen.unsqueeze(1)).logical_or(eye).unsqueeze(1);  // [B, 1, T, T]
      const torch::Tensor delta = BlockDelta(*layer->block, x, cos, sin, allowed);
      x = x + weight.unsqueeze(-1).to(x.dtype()) * delta;
      layers_used = layers_used + chosen.to(x.dtype());
      routed_counts.push_back(chosen.sum().to(torch::kFloat64));
    }
  }

  DecoderOutput out;
  out.hidden = x;
  out.logits = head(norm(x));
  out.router_logits = std::move(router_logits);
  AutocastOff fp32_losses(x.device());
  out.routed_counts = routed_counts.empty()
                          ? torch::zeros({0}, torch::dtype(torch::kFloat64).device(x.device()))
                          : torch::stack(routed_counts);
  out.router_loss = routed_layers > 0 ? router_loss / double(routed_layers) : router_loss;
  out.balance_loss = torch::zeros({}, x.options());
  if (!router_probs.empty() && rho < 1.0 && o.family() == Family::kXmod) {
    const torch::Tensor u = torch::stack(router_probs).mean(0);  // [B, T]
    out.balance_loss = (u - rho).pow(2).mean() / (rho * (1.0 - rho));
  }
  out.z_loss = torch::zeros({}, x.options());
  out.entropy = torch::zeros({}, x.options());
  if (!expert_stats.empty()) {
    const double layers_with_experts = double(expert_stats.size());
    for (const ExpertStats& st : expert_stats) {
      if (o.family() == Family::kMoe) {
        out.balance_loss = out.balance_loss + st.balance_loss / layers_with_experts;
        out.z_loss = out.z_loss + st.z_loss / layers_with_experts;
      } else {
        out.entropy = out.entropy + st.entropy / double(o.n_layers());
      }
    }
  }
  out.expert_stats = std::move(expert_stats);
  out.aux_loss = o.balance_coef() * out.balance_loss + o.router_coef() * out.router_loss +
                 o.z_coef() * out.z_loss + entropy_coef() * out.entropy;
  out.depth_fraction = (layers_used / double(o.n_layers())).mean().detach();
  return out;
}

int64_t CountModuleParameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace xmod
