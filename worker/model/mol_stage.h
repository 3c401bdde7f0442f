// Mixture of Layers (Ternovtsii & Bilak, arXiv:2605.09516): a split stage
// replaces one full-width layer by S shared and N − S routed thin blocks of
// width d_t, each behind its own down and up projection (docs/mol.md).
//
//   ThinBlock_i(x) = W_up,i (Block_i(W_down,i x) − W_down,i x)              (Eq. 1)
//   Stage(x) = x + Σ_shared ThinBlock_j(x) + (1/k) Σ_{i ∈ topk} w_i ThinBlock_i(x)  (Eq. 2)
//
// with w the softmax of the router's logits over the routed blocks, of which each
// token keeps its k largest, not renormalised. A routed block runs only on the
// tokens routed to it, gathered per sequence in position order (restricted
// routing): its token mixer sees those tokens and no others. Routing is per token,
// so the stage is causal as it stands; it has no capacity limit, so no token is
// ever dropped. Shared blocks mix with softmax attention over every token; routed
// blocks with Gated DeltaNet (or softmax attention, `routed_attention`).
#ifndef XMOD_WORKER_MODEL_MOL_STAGE_H_
#define XMOD_WORKER_MODEL_MOL_STAGE_H_

#include <torch/torch.h>

#include <string_view>
#include <utility>
#include <vector>

#include "worker/model/block.h"
#include "worker/model/layer.h"

namespace xmod {

// What a stage records in the pass's AuxRecord, per stage: its CV² balancing loss
// (unweighted, fp32, with its gradient) and the tokens each routed block ran on
// ([N − S], float64, detached).
inline constexpr std::string_view kMolBalanceLoss = "mol_balance_loss";
inline constexpr std::string_view kMolBlockLoad = "mol_block_load";

enum class MolMixer { kSoftmax, kDeltaNet };

struct MolStageOptions {
  MolStageOptions(int64_t d_model, int64_t thin_width, int64_t head_dim, int64_t blocks,
                  int64_t shared, int64_t top_k)
      : d_model_(d_model),
        thin_width_(thin_width),
        head_dim_(head_dim),
        blocks_(blocks),
        shared_(shared),
        top_k_(top_k) {}
  TORCH_ARG(int64_t, d_model);      // d
  TORCH_ARG(int64_t, thin_width);   // d_t
  TORCH_ARG(int64_t, head_dim);     // every thin block's head width (the model's)
  TORCH_ARG(int64_t, blocks);       // N, shared and routed
  TORCH_ARG(int64_t, shared);       // S, always on (the first S blocks)
  TORCH_ARG(int64_t, top_k);        // k of the N − S routed blocks per token
  TORCH_ARG(int64_t, thin_ff) = 0;  // the thin blocks' SwiGLU width; 0: DefaultDff(d_t)
  TORCH_ARG(MolMixer, routed_attention) = MolMixer::kDeltaNet;
};

// Eq. 1. Submodules: down (d -> d_t), block (the thin block), up (d_t -> d).
class ThinBlockImpl : public torch::nn::Module {
 public:
  ThinBlockImpl(int64_t d_model, int64_t thin_width, Block block);
  // x [B, N, d] -> [B, N, d]: up(block(down x) − down x), that is up(block's delta).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  // down from N(0, std), up (a residual branch's output) from N(0, out_std), then the block.
  void InitWeights(const InitScales& scales);
  torch::nn::Linear down{nullptr}, up{nullptr};
  Block block{nullptr};
};
TORCH_MODULE(ThinBlock);

// Submodules: blocks.{0..N-1} (ThinBlock; the first S shared), router (d -> N − S,
// no bias, fp32).
class MolStageImpl : public LayerImpl {
 public:
  explicit MolStageImpl(const MolStageOptions& options);
  torch::Tensor forward(const torch::Tensor& x, LayerPass& pass) override;
  void InitWeights(const InitScales& scales) override;

  // Eq. 2's routing of x [B, T, d]: the routed blocks' indices [B, T, k] (0 is the
  // first routed block) and their weights [B, T, k] (fp32): the softmax over all
  // N − S routed logits at the chosen blocks, not renormalised.
  std::pair<torch::Tensor, torch::Tensor> Route(const torch::Tensor& x);
  // Routed block `i`'s thin-block output at the tokens `chosen` [B, T] (bool) marks,
  // computed on those tokens alone, gathered per sequence in position order; zero
  // elsewhere. x [B, T, d]; cos, sin [1, T, head_dim / 2].
  torch::Tensor RoutedBlockOutput(int64_t i, const torch::Tensor& x, const torch::Tensor& chosen,
                                  const torch::Tensor& cos, const torch::Tensor& sin);

  const MolStageOptions& options() const { return o_; }
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear router{nullptr};

 private:
  // Routed block i run on the tokens `chosen` marks: their rows in the flattened
  // [B·T] batch and the block's outputs there [M, d]; both undefined when no
  // token is chosen.
  struct RoutedRows {
    torch::Tensor rows, out;
  };
  RoutedRows RunRouted(int64_t i, const torch::Tensor& x, const torch::Tensor& chosen,
                       const torch::Tensor& cos, const torch::Tensor& sin);
  MolStageOptions o_;
  std::vector<ThinBlock> thin_;
};
TORCH_MODULE(MolStage);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_MOL_STAGE_H_
