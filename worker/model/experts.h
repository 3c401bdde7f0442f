// The channel mixers (mixer.h): the dense SwiGLU MLP, and the expert MLPs of
// the literature baselines (docs/baselines.md), a token-choice top-k
// Mixture-of-Experts layer (moe) and DECO's ReLU-routed experts (deco). Each is
// called on the normed residual stream. Routers run in fp32 (an autocast-off
// island, as X-MoD's router does); the experts compute in the region's precision.
//
// MoE dispatch computes only what is routed: the (token, expert) assignments are
// sorted by expert, each expert multiplies the rows routed to it, and the outputs
// are scaled by their gates and added back to their tokens (index_add_). DECO
// trains every expert densely (one wide up and one wide down projection), as its
// paper does; a zero score only zeroes that expert's contribution.
#ifndef XMOD_WORKER_MODEL_EXPERTS_H_
#define XMOD_WORKER_MODEL_EXPERTS_H_

#include <torch/torch.h>

#include <string_view>

#include "common/accounting.h"
#include "worker/model/mixer.h"

namespace xmod {

// SwiGLU: w2(silu(w1 x) · w3 x), with w1 and w3 fused into one matmul. The dense
// MLP of every block, and the shared experts of moe and deco. Records nothing.
class MlpImpl : public ChannelMixerImpl {
 public:
  MlpImpl(int64_t d_model, int64_t d_ff);
  torch::Tensor forward(const torch::Tensor& x);  // [..., d] -> [..., d]
  torch::Tensor Mix(const torch::Tensor& x, AuxRecord* aux) override;
  // w13 from N(0, std), w2 (a residual branch's output) from N(0, out_std).
  void InitWeights(const InitScales& scales) override;
  torch::nn::Linear w13{nullptr}, w2{nullptr};
};
TORCH_MODULE(Mlp);

// The initial value of DECO's per-expert score scale λ.
inline constexpr double kDecoScaleInit = 0.1;

// How top-k MoE turns router logits z [N, E] into gates.
enum class MoeGate {
  kSoftmax,     // top-k over z, softmax over the k selected logits (Megatron's default)
  kPreSoftmax,  // top-k over softmax(z) over all E; renormalised over the k when k > 1
  kSigmoid,     // top-k over sigmoid(z), renormalised over the k (DeepSeek-V3)
};
// "softmax", "pre_softmax", "sigmoid"; the parse is INVALID_ARGUMENT otherwise.
const char* MoeGateName(MoeGate gate);
bool ParseMoeGate(const std::string& name, MoeGate* gate);

// What one expert-MLP call measured. Losses are fp32 scalars that carry gradients
// (unweighted: the objectives of expert_aux.h apply the coefficients); counts are
// float64, detached. Inside a decoder the mixers record them in its AuxRecord
// under the names below, which expert_aux.cc reads.
struct ExpertStats {
  torch::Tensor balance_loss;  // moe: E/(k·N²) · Σ_e (Σ_t p_te) · c_e (1 at perfect balance)
  torch::Tensor z_loss;        // moe: mean_t (logsumexp_e z_te)²
  torch::Tensor entropy;       // deco: mean_t −Σ_e p_te log(p_te + 1e-5), p = s / (Σ s + 1e-5)
  torch::Tensor load;          // [E]: assignments each expert computed (moe, after dropping)
                               // or tokens with a positive score (deco)
  torch::Tensor routed;        // [E] moe: assignments before dropping (c_e), for bias balancing
  torch::Tensor dropped;       // moe: assignments dropped by the capacity
  int64_t tokens = 0;          // N
};

inline constexpr std::string_view kMoeBalanceLoss = "moe_balance_loss";  // balance_loss
inline constexpr std::string_view kMoeZLoss = "moe_z_loss";              // z_loss
inline constexpr std::string_view kMoeRouted = "moe_routed";             // routed
inline constexpr std::string_view kMoeDropped = "moe_dropped";           // dropped (on the host)
inline constexpr std::string_view kDecoEntropy = "deco_entropy";         // entropy
inline constexpr std::string_view kExpertLoad = "expert_load";           // load (moe and deco)
// deco: N · E, the scores of the call (float64 on the host).
inline constexpr std::string_view kDecoScoreSlots = "deco_score_slots";

// The Switch/GShard balancing loss without α: E/(k·N²) · Σ_e (Σ_t p_te) · c_e for
// routing probabilities p [N, E] and assignments per expert c [E]. It is 1 when
// both are uniform (c_e = kN/E, p_te = 1/E) and E when k = 1 and every token goes,
// with probability 1, to one expert.
torch::Tensor SwitchBalanceLoss(const torch::Tensor& p, const torch::Tensor& counts, int64_t k);

struct MoeMlpOptions {
  MoeMlpOptions(int64_t d_model, int64_t experts, int64_t top_k, int64_t width)
      : d_model_(d_model), experts_(experts), top_k_(top_k), width_(width) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, experts);     // E
  TORCH_ARG(int64_t, top_k);       // k
  TORCH_ARG(int64_t, width);       // d_e
  TORCH_ARG(int64_t, shared) = 0;  // K_s always-on experts of width d_e (one SwiGLU of K_s·d_e)
  TORCH_ARG(MoeGate, gate) = MoeGate::kSoftmax;
  // 0: dropless. Otherwise an expert computes at most C = ceil(N·k/E · cf)
  // assignments, keeping those with the highest gates.
  TORCH_ARG(double, capacity_factor) = 0.0;
};

class MoeMlpImpl : public ChannelMixerImpl {
 public:
  explicit MoeMlpImpl(const MoeMlpOptions& options);
  // x [..., d] -> [..., d]; `stats` (optional) receives the losses and loads.
  torch::Tensor forward(const torch::Tensor& x, ExpertStats* stats = nullptr);
  // forward, recording the stats under the kMoe* names and kExpertLoad.
  torch::Tensor Mix(const torch::Tensor& x, AuxRecord* aux) override;
  // w13 and router from N(0, std), w2 from N(0, out_std), then the shared expert.
  void InitWeights(const InitScales& scales) override;
  // The gates and experts of each token, as forward chooses them: indices and
  // gates [N, k] (fp32) for logits z [N, E] (fp32).
  std::pair<torch::Tensor, torch::Tensor> Route(const torch::Tensor& z) const;
  // Aux-loss-free balancing (DeepSeek-V3): bias ← bias − rate · sign(c_e − mean c)
  // for the assignments `routed` [E] of a whole step (all ranks).
  void UpdateBias(const torch::Tensor& routed, double rate);
  const MoeMlpOptions& options() const { return options_; }

  torch::nn::Linear router{nullptr};  // d -> E, no bias, fp32
  torch::Tensor w13;                  // [E, d, 2·d_e]: gate and up projections of each expert
  torch::Tensor w2;                   // [E, d_e, d]: down projections
  Mlp shared{nullptr};                // width K_s·d_e; null without shared experts
  torch::Tensor bias;                 // [E] fp32 buffer: selection bias, 0 unless balancing

 private:
  MoeMlpOptions options_;
};
TORCH_MODULE(MoeMlp);

struct DecoMlpOptions {
  DecoMlpOptions(int64_t d_model, int64_t experts, int64_t width, int64_t shared_width)
      : d_model_(d_model), experts_(experts), width_(width), shared_width_(shared_width) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, experts);       // E
  TORCH_ARG(int64_t, width);         // d_e (DECO: 64)
  TORCH_ARG(int64_t, shared_width);  // d_s of the SwiGLU shared expert (0: none)
  TORCH_ARG(double, eps) = 1e-5;     // NormSiLU's RMS epsilon
};

// NormSiLU: u [N, E·d_e] centred over all E·d_e entries, RMS-normalised per
// expert block of d_e with the shared weight γ [d_e], then SiLU.
torch::Tensor NormSilu(const torch::Tensor& u, const torch::Tensor& gamma, int64_t experts,
                       double eps);

class DecoMlpImpl : public ChannelMixerImpl {
 public:
  explicit DecoMlpImpl(const DecoMlpOptions& options);
  // x [..., d] -> [..., d]: down((NormSiLU(up x) ⊙ relu(router x)·λ)) + shared(x).
  torch::Tensor forward(const torch::Tensor& x, ExpertStats* stats = nullptr);
  // forward, recording kDecoEntropy, kExpertLoad and kDecoScoreSlots.
  torch::Tensor Mix(const torch::Tensor& x, AuxRecord* aux) override;
  // λ = kDecoScaleInit, γ = 1; router and up from N(0, std), down from
  // N(0, out_std); then the shared expert.
  void InitWeights(const InitScales& scales) override;
  const DecoMlpOptions& options() const { return options_; }

  torch::nn::Linear router{nullptr};  // d -> E, no bias, fp32
  torch::Tensor expert_scale;         // λ [E], init kDecoScaleInit
  torch::nn::Linear up{nullptr};      // d -> E·d_e, no bias
  torch::nn::Linear down{nullptr};    // E·d_e -> d, no bias
  torch::Tensor norm_weight;          // NormSiLU's γ [d_e], init 1
  Mlp shared{nullptr};                // width d_s; null without a shared expert

 private:
  DecoMlpOptions options_;
};
TORCH_MODULE(DecoMlp);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_EXPERTS_H_
