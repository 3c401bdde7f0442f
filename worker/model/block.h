// The pre-norm block every layer runs: RMSNorm, a token mixer, RMSNorm, a
// channel mixer (mixer.h), each mixer on a residual branch. Which mixers a
// block holds is its family's choice (family/); the block is the same for all.
#ifndef XMOD_WORKER_MODEL_BLOCK_H_
#define XMOD_WORKER_MODEL_BLOCK_H_

#include <torch/torch.h>

#include <memory>

#include "worker/model/mixer.h"

namespace xmod {

// x · rsqrt(mean(x²) + eps) · weight, over the last dimension.
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);  // [..., dim] -> [..., dim]
  void InitWeights() { weight.fill_(1.0); }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Submodules, in registration order (their names are the checkpoint format):
// norm1, attn (the token mixer), norm2, mlp (the channel mixer).
class BlockImpl : public torch::nn::Module {
 public:
  // The mixers come built: the order in which a family constructs them is part
  // of the global generator's stream, and so of the initial weights.
  BlockImpl(int64_t d_model, std::shared_ptr<TokenMixerImpl> token_mixer,
            std::shared_ptr<ChannelMixerImpl> channel_mixer);
  // What the block adds to its input x [B, N, d]:
  // a + channel_mixer(norm2(x + a)) with a = token_mixer(norm1(x)).
  // cos, sin [B or 1, N, head_dim / 2] and allowed as in TokenPositions; the
  // channel mixer records into `aux` when it is given.
  torch::Tensor Delta(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      const torch::Tensor& allowed = {}, AuxRecord* aux = nullptr);
  void InitWeights(const InitScales& scales);

  RMSNorm norm1{nullptr}, norm2{nullptr};
  std::shared_ptr<TokenMixerImpl> token_mixer;
  std::shared_ptr<ChannelMixerImpl> channel_mixer;
};
TORCH_MODULE(Block);

// block->Delta(x, cos, sin, allowed) through a custom autograd function that saves
// only its tensor inputs: the backward pass runs the block's forward again (in the
// autocast state and attention path of the forward) and differentiates that. The
// values and gradients are those of Delta itself; what changes is memory (one
// block's activations alive at a time in the backward, instead of all of them)
// for one more forward per block. Nothing is recorded (the replay runs without
// autograd, so recorded losses would carry no gradient): the families whose
// channel mixers record losses do not recompute (ModelFamily::recompute). The
// block must outlive the backward pass.
torch::Tensor RecomputedDelta(BlockImpl& block, const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin, const torch::Tensor& allowed = {});

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_BLOCK_H_
