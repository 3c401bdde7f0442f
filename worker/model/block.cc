#include "worker/model/block.h"

#include "worker/model/fused_cpu.h"
#include "worker/model/precision.h"

namespace xmod {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return RmsNorm(x, weight, eps_); }

BlockImpl::BlockImpl(int64_t d_model, std::shared_ptr<TokenMixerImpl> token_mixer_module,
                     std::shared_ptr<ChannelMixerImpl> channel_mixer_module) {
  norm1 = register_module("norm1", RMSNorm(d_model));
  token_mixer = register_module("attn", std::move(token_mixer_module));
  norm2 = register_module("norm2", RMSNorm(d_model));
  channel_mixer = register_module("mlp", std::move(channel_mixer_module));
}

torch::Tensor BlockImpl::Delta(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& allowed,
                               AuxRecord* aux) {
  const torch::Tensor a = token_mixer->forward(norm1(x), TokenPositions{cos, sin, allowed});
  const torch::Tensor h = norm2(x + a);
  return a + channel_mixer->Mix(h, aux);
}

void BlockImpl::InitWeights(const InitScales& scales) {
  norm1->InitWeights();
  token_mixer->InitWeights(scales);
  norm2->InitWeights();
  channel_mixer->InitWeights(scales);
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

}  // namespace xmod
