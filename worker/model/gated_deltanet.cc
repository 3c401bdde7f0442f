#include "worker/model/gated_deltanet.h"

#include <cmath>
#include <limits>
#include <vector>

#include "worker/model/precision.h"

namespace xmod {

namespace {

using torch::indexing::Slice;

// The rule's inputs in fp32, q already scaled.
struct RuleInputs {
  torch::Tensor q, k, v, g, beta, h;
};

RuleInputs Fp32Inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& g, const torch::Tensor& beta, double scale,
                      const torch::Tensor& initial_state) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 &&
                  v.sizes().slice(0, 3) == q.sizes().slice(0, 3),
              "gated delta rule: q, k [B, H, T, K] and v [B, H, T, V] expected");
  TORCH_CHECK(g.sizes() == q.sizes().slice(0, 3) && beta.sizes() == g.sizes(),
              "gated delta rule: g and beta [B, H, T] expected");
  RuleInputs in;
  in.q = q.to(torch::kFloat32) * scale;
  in.k = k.to(torch::kFloat32);
  in.v = v.to(torch::kFloat32);
  in.g = g.to(torch::kFloat32);
  in.beta = beta.to(torch::kFloat32);
  const int64_t b = q.size(0), h = q.size(1), dk = q.size(3), dv = v.size(3);
  if (initial_state.defined()) {
    TORCH_CHECK(initial_state.sizes() == torch::IntArrayRef({b, h, dk, dv}),
                "gated delta rule: initial state [B, H, K, V] expected");
    in.h = initial_state.to(torch::kFloat32);
  } else {
    in.h = torch::zeros({b, h, dk, dv}, in.v.options());
  }
  return in;
}

// Causal depthwise convolution over the tokens of x [B, N, C] with kernel
// w [C, 1, width]: output i reads inputs i - width + 1 .. i (zeros before 0).
torch::Tensor CausalConv(const torch::Tensor& x, const torch::Tensor& w) {
  const int64_t n = x.size(1), width = w.size(2);
  const torch::Tensor y =
      torch::conv1d(x.transpose(1, 2), w.to(x.scalar_type()), {}, 1, width - 1, 1, x.size(2));
  return y.narrow(2, 0, n).transpose(1, 2);
}

// x / sqrt(Σ x² + 1e-6) over the last dimension (fla's l2norm).
torch::Tensor L2Normalize(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).sum(-1, true) + 1e-6);
}

}  // namespace

DeltaRuleResult GatedDeltaRuleRecurrent(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& beta, double scale,
                                        const torch::Tensor& initial_state) {
  AutocastOff fp32(q.device());
  RuleInputs in = Fp32Inputs(q, k, v, g, beta, scale, initial_state);
  torch::Tensor h = in.h;
  std::vector<torch::Tensor> outs;
  outs.reserve(q.size(2));
  for (int64_t t = 0; t < q.size(2); ++t) {
    const torch::Tensor kt = in.k.select(2, t).unsqueeze(-2);  // [B, H, 1, K]
    h = h * in.g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    const torch::Tensor written =
        in.beta.select(2, t).unsqueeze(-1).unsqueeze(-1) *
        (in.v.select(2, t).unsqueeze(-2) - torch::matmul(kt, h));  // [B, H, 1, V]
    h = h + torch::matmul(kt.transpose(-2, -1), written);
    outs.push_back(torch::matmul(in.q.select(2, t).unsqueeze(-2), h).squeeze(-2));
  }
  DeltaRuleResult r;
  r.out = (outs.empty() ? torch::zeros_like(in.v) : torch::stack(outs, 2)).to(v.scalar_type());
  r.state = h;
  return r;
}

// Per chunk of C tokens (Γ the within-chunk cumulative sum of g, D_ij = exp(Γ_i − Γ_j)
// for i >= j and 0 above the diagonal, h0 the state entering the chunk), the
// recurrence unrolls to
//   (I + A) V' = diag(β) V − diag(β e^Γ) K h0,  A = strictly-lower((diag(β) K Kᵀ) ⊙ D),
// so with T = (I + A)⁻¹ (unit lower triangular): V' = U − W h0, U = T diag(β) V,
// W = T diag(β e^Γ) K; then O = diag(e^Γ) Q h0 + ((Q Kᵀ) ⊙ D) V' and the state
// leaving the chunk is e^{Γ_C} h0 + (diag(e^{Γ_C − Γ}) K)ᵀ V'. Everything but the
// last two lines is computed for all chunks at once.
DeltaRuleResult GatedDeltaRuleChunked(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& g,
                                      const torch::Tensor& beta, double scale,
                                      const torch::Tensor& initial_state, int64_t chunk) {
  TORCH_CHECK(chunk >= 1, "gated delta rule: chunk must be at least 1");
  AutocastOff fp32(q.device());
  RuleInputs in = Fp32Inputs(q, k, v, g, beta, scale, initial_state);
  const int64_t b = q.size(0), heads = q.size(1), t = q.size(2), dv = v.size(3);
  const int64_t c = chunk, n = (t + c - 1) / c, pad = n * c - t;
  // Padding tokens write nothing (β = 0, k = 0) and do not decay (g = 0).
  auto chunks = [&](const torch::Tensor& x) {
    const torch::Tensor padded = pad == 0
                                     ? x
                                     : (x.dim() == 4 ? torch::constant_pad_nd(x, {0, 0, 0, pad})
                                                     : torch::constant_pad_nd(x, {0, pad}));
    return x.dim() == 4 ? padded.view({b, heads, n, c, x.size(3)}) : padded.view({b, heads, n, c});
  };
  const torch::Tensor qc = chunks(in.q), kc = chunks(in.k), vc = chunks(in.v);
  const torch::Tensor betac = chunks(in.beta);
  const torch::Tensor gamma = chunks(in.g).cumsum(-1);  // [B, H, n, C]
  const auto opts = in.v.options().dtype(torch::kBool);
  const torch::Tensor above = torch::ones({c, c}, opts).triu(1);
  const torch::Tensor decay =
      (gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(above, -INFINITY).exp();
  const torch::Tensor kb = kc * betac.unsqueeze(-1);
  const torch::Tensor a = (torch::matmul(kb, kc.transpose(-2, -1)) * decay).tril(-1);
  const torch::Tensor eye = torch::eye(c, in.v.options()).expand_as(a);
  // unitriangular: the solve reads only the strict lower triangle of I + A.
  const torch::Tensor tinv = torch::linalg_solve_triangular(a, eye, /*upper=*/false,
                                                            /*left=*/true, /*unitriangular=*/true);
  const torch::Tensor u = torch::matmul(tinv, vc * betac.unsqueeze(-1));
  const torch::Tensor w = torch::matmul(tinv, kb * gamma.exp().unsqueeze(-1));
  const torch::Tensor q_decayed = qc * gamma.exp().unsqueeze(-1);
  const torch::Tensor scores = torch::matmul(qc, kc.transpose(-2, -1)) * decay;
  const torch::Tensor last = gamma.select(-1, c - 1);  // [B, H, n]
  const torch::Tensor k_to_end = kc * (last.unsqueeze(-1) - gamma).exp().unsqueeze(-1);
  const torch::Tensor last_decay = last.exp();
  torch::Tensor h = in.h;
  std::vector<torch::Tensor> outs;
  outs.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor v_new = u.select(2, i) - torch::matmul(w.select(2, i), h);
    outs.push_back(torch::matmul(q_decayed.select(2, i), h) +
                   torch::matmul(scores.select(2, i), v_new));
    h = h * last_decay.select(2, i).unsqueeze(-1).unsqueeze(-1) +
        torch::matmul(k_to_end.select(2, i).transpose(-2, -1), v_new);
  }
  DeltaRuleResult r;
  torch::Tensor out = n == 0 ? torch::zeros({b, heads, 0, dv}, in.v.options())
                             : torch::cat(outs, 2);  // [B, H, n·C, V]
  r.out = out.narrow(2, 0, t).to(v.scalar_type());
  r.state = h;
  return r;
}

GatedDeltaNetImpl::GatedDeltaNetImpl(const GatedDeltaNetOptions& options) : o_(options) {
  TORCH_CHECK(o_.n_heads() >= 1 && o_.d_model() % o_.n_heads() == 0, "gated deltanet: d_model ",
              o_.d_model(), " is not a multiple of n_heads ", o_.n_heads());
  TORCH_CHECK(o_.expand_v() >= 1 && o_.conv_size() >= 1 && o_.chunk() >= 1,
              "gated deltanet: expand_v, conv_size and chunk must be at least 1");
  const int64_t d = o_.d_model(), h = o_.n_heads(), hk = h * head_k(), hv = h * head_v();
  q_conv = register_parameter("q_conv", torch::empty({hk, 1, o_.conv_size()}));
  k_conv = register_parameter("k_conv", torch::empty({hk, 1, o_.conv_size()}));
  v_conv = register_parameter("v_conv", torch::empty({hv, 1, o_.conv_size()}));
  A_log = register_parameter("A_log", torch::empty({h}));
  dt_bias = register_parameter("dt_bias", torch::empty({h}));
  o_norm = register_parameter("o_norm", torch::ones({head_v()}));
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  q_proj = linear("q_proj", d, hk);
  k_proj = linear("k_proj", d, hk);
  v_proj = linear("v_proj", d, hv);
  a_proj = linear("a_proj", d, h);
  b_proj = linear("b_proj", d, h);
  g_proj = linear("g_proj", d, hv);
  o_proj = linear("o_proj", hv, d);
}

torch::Tensor GatedDeltaNetImpl::LogDecay(const torch::Tensor& x) {
  AutocastOff fp32(x.device());
  const torch::Tensor a = a_proj(x.to(torch::kFloat32));
  return -A_log.exp() * torch::softplus(a + dt_bias);
}

torch::Tensor GatedDeltaNetImpl::forward(const torch::Tensor& x, const TokenPositions& at) {
  TORCH_CHECK(!at.allowed.defined(),
              "gated deltanet: an attention mask is not supported; run the mixer on the "
              "tokens it should see, in position order");
  return Run(x, {}, nullptr);
}

torch::Tensor GatedDeltaNetImpl::Run(const torch::Tensor& x, const torch::Tensor& initial_state,
                                     torch::Tensor* final_state) {
  const int64_t b = x.size(0), n = x.size(1), h = o_.n_heads(), dk = head_k(), dv = head_v();
  auto heads = [&](const torch::Tensor& y, int64_t width) {
    return y.view({b, n, h, width}).transpose(1, 2);  // [B, H, N, width]
  };
  // q and k are normalised in fp32, as the rule computes.
  auto normed = [&](const torch::Tensor& y) {
    return L2Normalize(heads(torch::silu(y), dk).to(torch::kFloat32));
  };
  const torch::Tensor q = normed(CausalConv(q_proj(x), q_conv));
  const torch::Tensor k = normed(CausalConv(k_proj(x), k_conv));
  const torch::Tensor v = heads(torch::silu(CausalConv(v_proj(x), v_conv)), dv);
  torch::Tensor g, beta;
  {
    AutocastOff fp32(x.device());
    g = LogDecay(x).transpose(1, 2);                                       // [B, H, N]
    beta = torch::sigmoid(b_proj(x.to(torch::kFloat32))).transpose(1, 2);  // [B, H, N]
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  DeltaRuleResult rule =
      o_.recurrent() ? GatedDeltaRuleRecurrent(q, k, v, g, beta, scale, initial_state)
                     : GatedDeltaRuleChunked(q, k, v, g, beta, scale, initial_state, o_.chunk());
  if (final_state != nullptr) *final_state = rule.state;
  // The gated RMSNorm per head: RMSNorm over V (ε 1e-5, fp32) times SiLU of the gate.
  torch::Tensor o = rule.out.transpose(1, 2);  // [B, N, H, V]
  {
    AutocastOff fp32(x.device());
    const torch::Tensor of = o.to(torch::kFloat32);
    o = (of * torch::rsqrt(of.pow(2).mean(-1, true) + 1e-5) * o_norm).to(o.scalar_type());
  }
  o = o * torch::silu(g_proj(x).view({b, n, h, dv}));
  return o_proj(o.reshape({b, n, h * dv}));
}

void GatedDeltaNetImpl::InitWeights(const InitScales& scales) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(o_.conv_size()));
  q_conv.uniform_(-bound, bound);
  k_conv.uniform_(-bound, bound);
  v_conv.uniform_(-bound, bound);
  A_log.copy_(torch::empty_like(A_log).uniform_(0.0, 16.0).log());
  const torch::Tensor dt =
      torch::empty_like(dt_bias).uniform_(std::log(1e-3), std::log(0.1)).exp().clamp_min(1e-4);
  dt_bias.copy_(dt + torch::log(-torch::expm1(-dt)));
  o_norm.fill_(1.0);
  for (torch::nn::Linear* p : {&q_proj, &k_proj, &v_proj, &a_proj, &b_proj, &g_proj}) {
    (*p)->weight.normal_(0.0, scales.std);
  }
  o_proj->weight.normal_(0.0, scales.out_std);
}

}  // namespace xmod
