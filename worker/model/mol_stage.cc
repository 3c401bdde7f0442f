#include "worker/model/mol_stage.h"

#include <string>

#include "common/accounting.h"
#include "worker/model/attention.h"
#include "worker/model/experts.h"
#include "worker/model/gated_deltanet.h"
#include "worker/model/precision.h"

namespace xmod {

ThinBlockImpl::ThinBlockImpl(int64_t d_model, int64_t thin_width, Block block_module) {
  down = register_module(
      "down", torch::nn::Linear(torch::nn::LinearOptions(d_model, thin_width).bias(false)));
  block = register_module("block", std::move(block_module));
  up = register_module(
      "up", torch::nn::Linear(torch::nn::LinearOptions(thin_width, d_model).bias(false)));
}

torch::Tensor ThinBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin) {
  // Block(z) − z is the block's delta: the inner residual is not projected up.
  return up(block->Delta(down(x), cos, sin));
}

void ThinBlockImpl::InitWeights(const InitScales& scales) {
  down->weight.normal_(0.0, scales.std);
  block->InitWeights(scales);
  up->weight.normal_(0.0, scales.out_std);
}

MolStageImpl::MolStageImpl(const MolStageOptions& options) : o_(options) {
  TORCH_CHECK(o_.thin_width() >= 1 && o_.head_dim() >= 1 && o_.thin_width() % o_.head_dim() == 0,
              "mol: the head width ", o_.head_dim(), " does not divide the thin width ",
              o_.thin_width());
  TORCH_CHECK(o_.shared() >= 0 && o_.shared() < o_.blocks(),
              "mol: a stage needs at least one routed block (blocks ", o_.blocks(), ", shared ",
              o_.shared(), ")");
  TORCH_CHECK(o_.top_k() >= 1 && o_.top_k() <= o_.blocks() - o_.shared(), "mol: top_k ", o_.top_k(),
              " is not within 1 .. the ", o_.blocks() - o_.shared(), " routed blocks");
  const int64_t dt = o_.thin_width(), heads = dt / o_.head_dim();
  const int64_t ff = o_.thin_ff() > 0 ? o_.thin_ff() : DefaultDff(dt);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o_.blocks(); ++i) {
    const bool routed = i >= o_.shared();
    std::shared_ptr<TokenMixerImpl> mixer;
    if (routed && o_.routed_attention() == MolMixer::kDeltaNet) {
      mixer = GatedDeltaNet(GatedDeltaNetOptions(dt, heads)).ptr();
    } else {
      mixer = Attention(dt, heads).ptr();
    }
    Mlp mlp(dt, ff);
    thin_.push_back(ThinBlock(o_.d_model(), dt, Block(dt, mixer, mlp.ptr())));
    blocks->push_back(thin_.back());
  }
  router = register_module(
      "router", torch::nn::Linear(
                    torch::nn::LinearOptions(o_.d_model(), o_.blocks() - o_.shared()).bias(false)));
}

std::pair<torch::Tensor, torch::Tensor> MolStageImpl::Route(const torch::Tensor& x) {
  AutocastOff fp32(x.device());
  const torch::Tensor probs = torch::softmax(router(x.to(torch::kFloat32)), -1);
  auto [weights, indices] = probs.topk(o_.top_k(), -1);
  return {indices, weights};
}

torch::Tensor MolStageImpl::RoutedBlockOutput(int64_t i, const torch::Tensor& x,
                                              const torch::Tensor& chosen, const torch::Tensor& cos,
                                              const torch::Tensor& sin) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const torch::Tensor counts = chosen.sum(1);  // [B]
  const int64_t longest = counts.max().item<int64_t>();
  if (longest == 0) return torch::zeros_like(x);
  // Each sequence's chosen positions first, in position order, then the others:
  // the first `longest` columns hold every chosen token, and the padding after a
  // sequence's own tokens cannot reach them (the block is causal).
  const torch::Tensor position = torch::arange(t, chosen.options().dtype(torch::kLong));
  const torch::Tensor key = position + t * chosen.logical_not().to(torch::kLong);
  const torch::Tensor order = std::get<1>(key.sort(1)).narrow(1, 0, longest);  // [B, n]
  const torch::Tensor valid =
      torch::arange(longest, counts.options()).unsqueeze(0) < counts.unsqueeze(1);  // [B, n]
  const torch::Tensor gathered = x.gather(1, order.unsqueeze(-1).expand({b, longest, d}));
  const int64_t half = cos.size(-1);
  auto angles = [&](const torch::Tensor& table) {  // [1, T, half] -> [B, n, half]
    return table.expand({b, t, half}).gather(1, order.unsqueeze(-1).expand({b, longest, half}));
  };
  const torch::Tensor out =
      thin_[i + o_.shared()]->forward(gathered, angles(cos), angles(sin)).to(x.scalar_type()) *
      valid.unsqueeze(-1).to(x.scalar_type());
  return torch::zeros_like(x).scatter_add(1, order.unsqueeze(-1).expand({b, longest, d}), out);
}

torch::Tensor MolStageImpl::forward(const torch::Tensor& x, LayerPass& pass) {
  torch::Tensor out = x;
  for (int64_t j = 0; j < o_.shared(); ++j) out = out + thin_[j]->forward(x, pass.cos, pass.sin);
  auto [indices, weights] = Route(x);
  const int64_t routed = o_.blocks() - o_.shared();
  // w_{t,i}: the kept weight of routed block i at each token (0 where not chosen).
  const torch::Tensor kept =
      torch::zeros({x.size(0), x.size(1), routed}, weights.options()).scatter(-1, indices, weights);
  torch::Tensor mixed;
  std::vector<double> load(routed, 0.0);
  for (int64_t i = 0; i < routed; ++i) {
    const torch::Tensor chosen = (indices == i).any(-1);  // [B, T]
    load[i] = static_cast<double>(chosen.sum().item<int64_t>());
    if (load[i] == 0) continue;
    const torch::Tensor part = RoutedBlockOutput(i, x, chosen, pass.cos, pass.sin) *
                               kept.select(-1, i).unsqueeze(-1).to(x.scalar_type());
    mixed = mixed.defined() ? mixed + part : part;
  }
  if (mixed.defined()) out = out + mixed / static_cast<double>(o_.top_k());
  // CV² of the blocks' importance I_i = Σ_t w_{t,i} over the batch (population
  // variance over the routed blocks).
  {
    AutocastOff fp32(x.device());
    const torch::Tensor importance = kept.sum(torch::IntArrayRef{0, 1});
    const torch::Tensor mean = importance.mean();
    pass.aux.Add(kMolBalanceLoss, (importance - mean).pow(2).mean() / (mean * mean + 1e-12));
  }
  pass.aux.Add(kMolBlockLoad, torch::tensor(load, torch::dtype(torch::kFloat64)));
  pass.layers_used = pass.layers_used + 1.0;
  return out;
}

void MolStageImpl::InitWeights(const InitScales& scales) {
  for (ThinBlock& block : thin_) block->InitWeights(scales);
  router->weight.normal_(0.0, scales.std);
}

}  // namespace xmod
