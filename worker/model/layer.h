// A decoder layer: the residual stream plus what its block adds. LayerImpl is
// the plain layer every token passes through, and the base of the layers that
// choose their tokens (routed_layer.h). The decoder runs them in a plain loop,
// handing each the same LayerPass.
#ifndef XMOD_WORKER_MODEL_LAYER_H_
#define XMOD_WORKER_MODEL_LAYER_H_

#include <torch/torch.h>

#include <string_view>
#include <vector>

#include "worker/model/aux.h"
#include "worker/model/block.h"

namespace xmod {

enum class Routing {
  kTopK,       // top-k per sequence, as trained
  kThreshold,  // sigmoid(r) > 0.5 per token: causal, for generation-honest evaluation
};

// The decoder records the pass's mean fraction of layers a token passed through
// (a detached scalar) under this name once the layers have run.
inline constexpr std::string_view kDepthFraction = "depth_fraction";

// What one forward pass carries from layer to layer besides the residual stream.
struct LayerPass {
  LayerPass(torch::Tensor cos, torch::Tensor sin, Routing routing, const torch::Tensor& stream)
      : cos(std::move(cos)),
        sin(std::move(sin)),
        routing(routing),
        aux(stream.options()),
        layers_used(torch::zeros({stream.size(0), stream.size(1)}, stream.options())) {}
  torch::Tensor cos, sin;  // [1, T, head_dim / 2]: rotary angles of positions 0 … T−1
  Routing routing;
  AuxRecord aux;              // what the layers record for the model's objectives
  torch::Tensor layers_used;  // [B, T]: how many layers each token has passed through
  // Per routed layer, in layer order (DecoderOutput's fields of the same names).
  std::vector<torch::Tensor> routed_counts, router_logits;
  torch::Tensor causal;  // threshold routing: the [T, T] lower triangle, built on first use
};

// The plain layer: x + block(x) for every token.
class LayerImpl : public torch::nn::Module {
 public:
  // Registers `block` as "block". recompute: the block keeps only its input for
  // the backward pass (RecomputedDelta) and records nothing.
  LayerImpl(Block block, bool recompute);
  // x [B, T, d] -> the residual stream after this layer.
  virtual torch::Tensor forward(const torch::Tensor& x, LayerPass& pass);
  // Whether the layer chooses the tokens it processes (depth routing).
  virtual bool routed() const { return false; }
  virtual void InitWeights(const InitScales& scales) { block->InitWeights(scales); }
  Block block{nullptr};

 protected:
  // A layer that holds its blocks itself (a Mixture-of-Layers stage,
  // mol_stage.h): `block` stays null and the subclass overrides forward and
  // InitWeights.
  LayerImpl() : recompute_(false) {}
  // block->Delta, or RecomputedDelta when this layer recomputes.
  torch::Tensor Delta(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      const torch::Tensor& allowed, AuxRecord* aux);

 private:
  bool recompute_;
};
TORCH_MODULE(Layer);

}  // namespace xmod

#endif  // XMOD_WORKER_MODEL_LAYER_H_
