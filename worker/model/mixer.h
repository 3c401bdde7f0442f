// The two slots of a block (block.h). A token mixer moves information between
// the positions of a sequence, causally: softmax attention (attention.h) or the
// linear attention Gated DeltaNet (gated_deltanet.h). A
// channel mixer transforms each position on its own: the SwiGLU MLP, top-k MoE
// or DECO's experts (experts.h). A new kind of either is one class deriving
// from these bases; the block, the layers and the decoder do not change.
#ifndef XMOD_WORKER_MODEL_MIXER_H_
#define XMOD_WORKER_MODEL_MIXER_H_

#include <torch/torch.h>

#include "worker/model/aux.h"

namespace xmod {

// Where the tokens of one mixer call sit. They may be any subset of a sequence
// (a routed layer's chosen tokens) in increasing position order.
struct TokenPositions {
  torch::Tensor cos, sin;  // [B or 1, N, head_dim / 2]: rotary angles of each token's position
  torch::Tensor allowed;   // optional bool [B, 1, N, N], true where query i may see key j;
                           // replaces the causal mask
};

// The standard deviations of the initial weights (DecoderImpl::reset_parameters).
struct InitScales {
  double std = 0.02;      // embeddings, routers, matrices that read the residual stream
  double out_std = 0.02;  // output projections of residual branches: std / sqrt(2 · depth)
};

// InitWeights, in both bases: sets every parameter of the module from the global
// LibTorch generator, in the order named_parameters() lists them (the module's
// own parameters, then its submodules in registration order). The order of the
// draws is part of the initial weights, and so of every golden loss.

class TokenMixerImpl : public torch::nn::Module {
 public:
  // x [B, N, d] -> [B, N, d]: token i sees the tokens at or before it, or those
  // `at.allowed` allows.
  virtual torch::Tensor forward(const torch::Tensor& x, const TokenPositions& at) = 0;
  virtual void InitWeights(const InitScales& scales) = 0;
};

// Its modules keep their own forward (the expert MLPs return typed statistics
// there); Mix is the block's entry point.
class ChannelMixerImpl : public torch::nn::Module {
 public:
  // x [..., d] -> [..., d], position by position. A mixer with losses or
  // statistics of its own records them in `aux` when it is given (aux.h).
  virtual torch::Tensor Mix(const torch::Tensor& x, AuxRecord* aux) = 0;
  virtual void InitWeights(const InitScales& scales) = 0;
};

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_MIXER_H_
