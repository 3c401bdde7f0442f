// Gated DeltaNet (Yang, Kautz, Hatamizadeh, ICLR 2025): a linear-attention
// token mixer (mixer.h) whose per-head state is a K x V matrix written by the
// gated delta rule, so its cost per token does not depend on the context.
// docs/gated-deltanet.md states the layer, the rule, its two computations and
// which defaults are the paper's and which are ours.
//
// The rule, per head, with state h in R^{K x V} (h = S^T of the paper):
//   h <- alpha_t h;  v'_t = beta_t (v_t - h^T k_t);  h <- h + k_t v'_t^T;  o_t = h^T q_t
// with alpha_t = exp(g_t) in (0, 1] (g_t <= 0 is the log decay) and beta_t in (0, 1).
// Two computations of the same function: GatedDeltaRuleRecurrent, token by token
// (the reference), and GatedDeltaRuleChunked, the chunked UT/WY form (dense
// matmuls within a chunk, one sequential step per chunk), which training uses.
// Both run in fp32 with autocast off, whatever the caller's precision, and return
// the caller's dtype.
#ifndef XMOD_WORKER_MODEL_GATED_DELTANET_H_
#define XMOD_WORKER_MODEL_GATED_DELTANET_H_

#include <torch/torch.h>

#include "worker/model/mixer.h"

namespace xmod {

struct DeltaRuleResult {
  torch::Tensor out;    // [B, H, T, V]
  torch::Tensor state;  // [B, H, K, V] (fp32): the state after the last token
};

// q, k [B, H, T, K]; v [B, H, T, V]; g, beta [B, H, T]; `scale` multiplies q;
// `initial_state` [B, H, K, V] or undefined (zero).
DeltaRuleResult GatedDeltaRuleRecurrent(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& g,
                                        const torch::Tensor& beta, double scale,
                                        const torch::Tensor& initial_state = {});
// The same, `chunk` tokens at a time (T need not be a multiple of it).
DeltaRuleResult GatedDeltaRuleChunked(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, const torch::Tensor& g,
                                      const torch::Tensor& beta, double scale,
                                      const torch::Tensor& initial_state = {}, int64_t chunk = 64);

struct GatedDeltaNetOptions {
  GatedDeltaNetOptions(int64_t d_model, int64_t n_heads) : d_model_(d_model), n_heads_(n_heads) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);         // head_k = d_model / n_heads
  TORCH_ARG(int64_t, expand_v) = 1;    // head_v = expand_v * head_k
  TORCH_ARG(int64_t, conv_size) = 4;   // the causal depthwise convolution's width
  TORCH_ARG(int64_t, chunk) = 64;      // tokens per chunk of the training path
  TORCH_ARG(bool, recurrent) = false;  // compute by the token-by-token reference
};

// Submodules, in registration order (the checkpoint format): q_proj, k_proj,
// v_proj (d -> H*K, H*K, H*V), a_proj, b_proj (d -> H: decay and write-strength
// logits), g_proj (d -> H*V: the output gate), o_proj (H*V -> d); parameters
// q_conv, k_conv, v_conv ([C, 1, conv_size] depthwise kernels), A_log, dt_bias
// ([H], one-dimensional and so free of weight decay, as the paper's code keeps
// them) and o_norm ([V], the gated RMSNorm's weight, shared by the heads).
class GatedDeltaNetImpl : public TokenMixerImpl {
 public:
  explicit GatedDeltaNetImpl(const GatedDeltaNetOptions& options);
  // x [B, N, d] -> [B, N, d]. Positions are implicit in the order of the N tokens
  // (no rotary embedding); `at.allowed` is refused: the rule sees every earlier
  // token it is given, so a routed caller gathers the tokens it wants instead.
  torch::Tensor forward(const torch::Tensor& x, const TokenPositions& at) override;
  // As forward, from `initial_state` [B, H, K, V] (undefined: zero); `final_state`
  // receives the state after the last token when given. The convolutions start
  // from zero history at every call.
  torch::Tensor Run(const torch::Tensor& x, const torch::Tensor& initial_state,
                    torch::Tensor* final_state);
  // The decay of each head and token: g = -exp(A_log) * softplus(a_proj(x) + dt_bias),
  // so alpha = exp(g) lies in (0, 1]. x [B, N, d] -> [B, N, H], fp32.
  torch::Tensor LogDecay(const torch::Tensor& x);
  // Projections from N(0, std), o_proj from N(0, out_std), the convolutions from
  // U(-1/sqrt(conv_size), 1/sqrt(conv_size)), A ~ U(0, 16) with A_log = log A,
  // dt_bias the inverse softplus of dt = exp(U(log 1e-3, log 0.1)), o_norm 1.
  void InitWeights(const InitScales& scales) override;

  const GatedDeltaNetOptions& options() const { return o_; }
  int64_t head_k() const { return o_.d_model() / o_.n_heads(); }
  int64_t head_v() const { return o_.expand_v() * head_k(); }

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, a_proj{nullptr},
      b_proj{nullptr}, g_proj{nullptr}, o_proj{nullptr};
  torch::Tensor q_conv, k_conv, v_conv, A_log, dt_bias, o_norm;

 private:
  GatedDeltaNetOptions o_;
};
TORCH_MODULE(GatedDeltaNet);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_GATED_DELTANET_H_
