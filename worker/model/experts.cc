#include "worker/model/experts.h"

#include <cmath>
#include <numeric>
#include <optional>

#include "worker/model/fused_cpu.h"
#include "worker/model/precision.h"

namespace xmod {

MlpImpl::MlpImpl(int64_t d_model, int64_t d_ff) {
  w13 = register_module("w13",
                        torch::nn::Linear(torch::nn::LinearOptions(d_model, 2 * d_ff).bias(false)));
  w2 =
      register_module("w2", torch::nn::Linear(torch::nn::LinearOptions(d_ff, d_model).bias(false)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return w2(Swiglu(w13(x))); }

torch::Tensor MlpImpl::Mix(const torch::Tensor& x, AuxRecord* /*aux*/) { return forward(x); }

void MlpImpl::InitWeights(const InitScales& scales) {
  w13->weight.normal_(0.0, scales.std);
  w2->weight.normal_(0.0, scales.out_std);
}

const char* MoeGateName(MoeGate gate) {
  switch (gate) {
    case MoeGate::kSoftmax:
      return "softmax";
    case MoeGate::kPreSoftmax:
      return "pre_softmax";
    case MoeGate::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

bool ParseMoeGate(const std::string& name, MoeGate* gate) {
  for (MoeGate g : {MoeGate::kSoftmax, MoeGate::kPreSoftmax, MoeGate::kSigmoid}) {
    if (name == MoeGateName(g)) {
      *gate = g;
      return true;
    }
  }
  return false;
}

torch::Tensor SwitchBalanceLoss(const torch::Tensor& p, const torch::Tensor& counts, int64_t k) {
  const double n = double(p.size(0)), e = double(p.size(1));
  return e / (double(k) * n * n) * (p.sum(0) * counts.to(p.dtype())).sum();
}

MoeMlpImpl::MoeMlpImpl(const MoeMlpOptions& o) : options_(o) {
  TORCH_CHECK(o.experts() >= 1 && o.top_k() >= 1 && o.top_k() <= o.experts(),
              "moe: top_k must be between 1 and the number of experts");
  router = register_module(
      "router", torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), o.experts()).bias(false)));
  w13 = register_parameter("w13", torch::empty({o.experts(), o.d_model(), 2 * o.width()}));
  w2 = register_parameter("w2", torch::empty({o.experts(), o.width(), o.d_model()}));
  if (o.shared() > 0) shared = register_module("shared", Mlp(o.d_model(), o.shared() * o.width()));
  bias = register_buffer("bias", torch::zeros({o.experts()}));
  // Usable alone; a Decoder re-initialises every parameter (InitWeights).
  torch::NoGradGuard no_grad;
  w13.normal_(0.0, 0.02);
  w2.normal_(0.0, 0.02);
}

void MoeMlpImpl::InitWeights(const InitScales& scales) {
  // named_parameters() order: this module's w13 and w2, then router, then shared.
  w13.normal_(0.0, scales.std);
  w2.normal_(0.0, scales.out_std);
  router->weight.normal_(0.0, scales.std);
  if (!shared.is_empty()) shared->InitWeights(scales);
}

std::pair<torch::Tensor, torch::Tensor> MoeMlpImpl::Route(const torch::Tensor& z) const {
  const int64_t k = options_.top_k();
  // The bias steers the selection only; the gates are computed without it.
  switch (options_.gate()) {
    case MoeGate::kSoftmax: {
      const torch::Tensor idx = std::get<1>((z + bias).topk(k, -1));  // [N, k]
      return {idx, torch::softmax(z.gather(1, idx), -1)};
    }
    case MoeGate::kPreSoftmax: {
      const torch::Tensor p = torch::softmax(z, -1);
      const torch::Tensor idx = std::get<1>((p + bias).topk(k, -1));
      torch::Tensor g = p.gather(1, idx);
      if (k > 1) g = g / g.sum(-1, /*keepdim=*/true);
      return {idx, g};
    }
    case MoeGate::kSigmoid: {
      const torch::Tensor p = torch::sigmoid(z);
      const torch::Tensor idx = std::get<1>((p + bias).topk(k, -1));
      const torch::Tensor g = p.gather(1, idx);
      return {idx, g / g.sum(-1, /*keepdim=*/true)};
    }
  }
  TORCH_CHECK(false, "moe: unknown gate");
}

void MoeMlpImpl::UpdateBias(const torch::Tensor& routed, double rate) {
  torch::NoGradGuard no_grad;
  const torch::Tensor c = routed.to(torch::kFloat32).to(bias.device());
  bias.sub_(rate * torch::sign(c - c.mean()));
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x, ExpertStats* stats) {
  const MoeMlpOptions& o = options_;
  const int64_t d = o.d_model(), e_count = o.experts(), k = o.top_k();
  const torch::Tensor xf = x.reshape({-1, d});  // [N, d]
  const int64_t n = xf.size(0);
  torch::Tensor idx, gates;  // [N, k]
  {
    // The router, the choice and its losses in fp32.
    AutocastOff fp32(x.device());
    const torch::Tensor z = router(xf.to(torch::kFloat32));  // [N, E]
    std::tie(idx, gates) = Route(z);
    if (stats != nullptr) {
      torch::Tensor p;  // routing probabilities over all E, for the balancing loss
      if (o.gate() == MoeGate::kSigmoid) {
        const torch::Tensor s = torch::sigmoid(z);
        p = s / s.sum(-1, /*keepdim=*/true);
      } else {
        p = torch::softmax(z, -1);
      }
      const torch::Tensor counts =
          torch::bincount(idx.reshape({-1}), /*weights=*/{}, e_count).to(torch::kFloat32);  // c_e
      stats->balance_loss = SwitchBalanceLoss(p, counts, k);
      stats->z_loss = torch::logsumexp(z, -1).pow(2).mean();
      stats->routed = counts.to(torch::kFloat64);
      stats->tokens = n;
    }
  }
  // Assignments sorted by expert (stable, so each expert sees its tokens in order).
  const torch::Tensor flat_expert = idx.reshape({-1});  // [N·k]
  const torch::Tensor order = std::get<1>(flat_expert.sort(/*stable=*/true, 0, false));
  const torch::Tensor token_of = torch::arange(n, idx.options())
                                     .unsqueeze(1)
                                     .expand({n, k})
                                     .reshape({-1})
                                     .index_select(0, order);
  const torch::Tensor gate_of = gates.reshape({-1}).index_select(0, order);
  const torch::Tensor counts_t =
      torch::bincount(flat_expert, /*weights=*/{}, e_count).to(torch::kCPU);
  const int64_t* counts = counts_t.data_ptr<int64_t>();
  const int64_t capacity =
      o.capacity_factor() > 0.0
          ? std::max<int64_t>(
                1, static_cast<int64_t>(
                       std::ceil(double(n) * double(k) / double(e_count) * o.capacity_factor())))
          : n * k;
  // One gather of the routed rows in expert order, viewed per expert below; the
  // weights unbound once per call, so that their backward is one stack, not a
  // full-size zero gradient per expert.
  const std::vector<torch::Tensor> w_in = w13.unbind(0), w_out = w2.unbind(0);
  const bool dropping = capacity < n * k;
  torch::Tensor x_sorted = dropping ? torch::Tensor() : xf.index_select(0, token_of);
  std::vector<torch::Tensor> kept_tokens, kept_gates, outs;  // kept_*: only when dropping
  std::vector<int64_t> computed(static_cast<size_t>(e_count), 0);
  int64_t offset = 0;
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t count = counts[e];
    if (count == 0) continue;
    torch::Tensor tok = token_of.narrow(0, offset, count);
    torch::Tensor g = gate_of.narrow(0, offset, count);
    torch::Tensor xe;
    if (!dropping) {
      xe = x_sorted.narrow(0, offset, count);
    } else {
      if (count > capacity) {
        // Over capacity: keep the assignments with the highest gates.
        const torch::Tensor keep = std::get<1>(g.topk(capacity));
        tok = tok.index_select(0, keep);
        g = g.index_select(0, keep);
      }
      xe = xf.index_select(0, tok);
    }
    offset += count;
    computed[static_cast<size_t>(e)] = tok.size(0);
    const std::vector<torch::Tensor> h = torch::matmul(xe, w_in[e]).chunk(2, -1);
    outs.push_back(torch::matmul(torch::silu(h[0]) * h[1], w_out[e]));  // [n_e, d]
    if (dropping) {
      kept_tokens.push_back(tok);
      kept_gates.push_back(g);
    }
  }
  torch::Tensor routed_out = torch::cat(outs);
  const torch::Tensor targets = dropping ? torch::cat(kept_tokens) : token_of;
  const torch::Tensor weights = dropping ? torch::cat(kept_gates) : gate_of;
  routed_out = routed_out * weights.unsqueeze(1).to(routed_out.dtype());
  torch::Tensor out = torch::zeros({n, d}, routed_out.options()).index_add(0, targets, routed_out);
  if (!shared.is_empty()) out = out + shared(xf);
  if (stats != nullptr) {
    stats->load = torch::tensor(computed, torch::kInt64).to(torch::kFloat64);
    const int64_t kept = std::accumulate(computed.begin(), computed.end(), int64_t{0});
    stats->dropped = torch::full({}, double(n * k - kept), torch::kFloat64);
  }
  return out.view(x.sizes());
}

torch::Tensor MoeMlpImpl::Mix(const torch::Tensor& x, AuxRecord* aux) {
  if (aux == nullptr) return forward(x);
  ExpertStats stats;
  torch::Tensor out = forward(x, &stats);
  aux->Add(kMoeBalanceLoss, stats.balance_loss);
  aux->Add(kMoeZLoss, stats.z_loss);
  aux->Add(kMoeRouted, stats.routed);
  aux->Add(kMoeDropped, stats.dropped);
  aux->Add(kExpertLoad, stats.load);
  return out;
}

torch::Tensor NormSilu(const torch::Tensor& u, const torch::Tensor& gamma, int64_t experts,
                       double eps) {
  const int64_t width = u.size(-1) / experts;
  const torch::Tensor centred = u - u.mean(-1, /*keepdim=*/true);  // over all E·d_e entries
  std::vector<int64_t> blocks(u.sizes().begin(), u.sizes().end() - 1);
  blocks.push_back(experts);
  blocks.push_back(width);
  const torch::Tensor v = centred.reshape(blocks);  // [..., E, d_e]
  const torch::Tensor normed = v * torch::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + eps) * gamma;
  return torch::silu(normed).reshape(u.sizes());
}

DecoMlpImpl::DecoMlpImpl(const DecoMlpOptions& o) : options_(o) {
  const int64_t wide = o.experts() * o.width();
  router = register_module(
      "router", torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), o.experts()).bias(false)));
  expert_scale = register_parameter("expert_scale", torch::full({o.experts()}, kDecoScaleInit));
  up = register_module("up",
                       torch::nn::Linear(torch::nn::LinearOptions(o.d_model(), wide).bias(false)));
  down = register_module(
      "down", torch::nn::Linear(torch::nn::LinearOptions(wide, o.d_model()).bias(false)));
  norm_weight = register_parameter("norm_weight", torch::ones({o.width()}));
  if (o.shared_width() > 0) shared = register_module("shared", Mlp(o.d_model(), o.shared_width()));
}

void DecoMlpImpl::InitWeights(const InitScales& scales) {
  // named_parameters() order: this module's λ and γ, then router, up, down, shared.
  expert_scale.fill_(kDecoScaleInit);
  norm_weight.fill_(1.0);
  router->weight.normal_(0.0, scales.std);
  up->weight.normal_(0.0, scales.std);
  down->weight.normal_(0.0, scales.out_std);
  if (!shared.is_empty()) shared->InitWeights(scales);
}

torch::Tensor DecoMlpImpl::Mix(const torch::Tensor& x, AuxRecord* aux) {
  if (aux == nullptr) return forward(x);
  ExpertStats stats;
  torch::Tensor out = forward(x, &stats);
  aux->Add(kDecoEntropy, stats.entropy);
  aux->Add(kExpertLoad, stats.load);
  aux->Add(kDecoScoreSlots,
           torch::full({}, double(stats.tokens) * double(stats.load.size(0)), torch::kFloat64));
  return out;
}

torch::Tensor DecoMlpImpl::forward(const torch::Tensor& x, ExpertStats* stats) {
  const DecoMlpOptions& o = options_;
  const int64_t d = o.d_model(), e_count = o.experts();
  const torch::Tensor xf = x.reshape({-1, d});  // [N, d]
  const int64_t n = xf.size(0);
  torch::Tensor scores;  // relu(z) · λ, [N, E] fp32
  {
    AutocastOff fp32(x.device());
    const torch::Tensor s = torch::relu(router(xf.to(torch::kFloat32)));  // [N, E]
    scores = s * expert_scale;
    if (stats != nullptr) {
      const torch::Tensor p = s / (s.sum(-1, /*keepdim=*/true) + 1e-5);
      stats->entropy = -(p * torch::log(p + 1e-5)).sum(-1).mean();
      stats->load = (s > 0).sum(0).to(torch::kFloat64).detach();
      stats->tokens = n;
    }
  }
  const torch::Tensor h = NormSilu(up(xf), norm_weight, e_count, o.eps());  // [N, E·d_e]
  const torch::Tensor weighted =
      (h.view({n, e_count, o.width()}) * scores.unsqueeze(-1).to(h.dtype())).view({n, -1});
  torch::Tensor out = down(weighted);
  if (!shared.is_empty()) out = out + shared(xf);
  return out.view(x.sizes());
}

}  // namespace xmod
