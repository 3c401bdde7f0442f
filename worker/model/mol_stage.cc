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

MolStageImpl::RoutedRows MolStageImpl::RunRouted(int64_t i, const torch::Tensor& x,
                                                 const torch::Tensor& chosen,
                                                 const torch::Tensor& cos,
                                                 const torch::Tensor& sin) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const torch::Tensor counts = chosen.sum(1);  // [B]
  const int64_t longest = counts.max().item<int64_t>();
  RoutedRows r;
  if (longest == 0) return r;
  // Each sequence's chosen positions first, in position order, then the others:
  // the first `longest` columns hold every chosen token, and the padding after a
  // sequence's own tokens cannot reach them (the block is causal).
  const auto index = chosen.options().dtype(torch::kLong);
  const torch::Tensor position = torch::arange(t, index);
  const torch::Tensor key = position + t * chosen.logical_not().to(torch::kLong);
  const torch::Tensor order = std::get<1>(key.sort(1)).narrow(1, 0, longest);  // [B, n]
  const torch::Tensor valid =
      (torch::arange(longest, index).unsqueeze(0) < counts.unsqueeze(1)).reshape(-1);  // [B·n]
  const torch::Tensor flat =
      (order + (torch::arange(b, index) * t).unsqueeze(1)).reshape(-1);  // [B·n] into B·T
  const torch::Tensor gathered = x.reshape({b * t, d}).index_select(0, flat).view({b, longest, d});
  const int64_t half = cos.size(-1);
  auto angles = [&](const torch::Tensor& table) {  // [1, T, half] -> [B, n, half]
    return table.reshape({-1, half}).index_select(0, order.reshape(-1)).view({b, longest, half});
  };
  const torch::Tensor out = thin_[i + o_.shared()]->forward(gathered, angles(cos), angles(sin));
  const torch::Tensor keep = valid.nonzero().squeeze(1);  // the real tokens among the B·n rows
  r.rows = flat.index_select(0, keep);
  r.out = out.reshape({b * longest, d}).index_select(0, keep).to(x.scalar_type());
  return r;
}

torch::Tensor MolStageImpl::RoutedBlockOutput(int64_t i, const torch::Tensor& x,
                                              const torch::Tensor& chosen, const torch::Tensor& cos,
                                              const torch::Tensor& sin) {
  const RoutedRows r = RunRouted(i, x, chosen, cos, sin);
  if (!r.rows.defined()) return torch::zeros_like(x);
  return torch::zeros({x.size(0) * x.size(1), x.size(2)}, x.options())
      .index_add(0, r.rows, r.out)
      .view(x.sizes());
}

torch::Tensor MolStageImpl::forward(const torch::Tensor& x, LayerPass& pass) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  torch::Tensor out = x;
  for (int64_t j = 0; j < o_.shared(); ++j) out = out + thin_[j]->forward(x, pass.cos, pass.sin);
  auto [indices, weights] = Route(x);
  const int64_t routed = o_.blocks() - o_.shared();
  // w_{t,i}: the kept weight of routed block i at each token (0 where not chosen).
  const torch::Tensor kept =
      torch::zeros({b, t, routed}, weights.options()).scatter(-1, indices, weights);
  const torch::Tensor kept_rows = kept.reshape({b * t, routed});
  // The routed blocks' weighted outputs, added row by row into one [B·T, d] buffer.
  torch::Tensor mixed = torch::zeros({b * t, d}, x.options());
  std::vector<double> load(routed, 0.0);
  for (int64_t i = 0; i < routed; ++i) {
    const torch::Tensor chosen = (indices == i).any(-1);  // [B, T]
    const RoutedRows r = RunRouted(i, x, chosen, pass.cos, pass.sin);
    if (!r.rows.defined()) continue;
    load[i] = static_cast<double>(r.rows.size(0));
    const torch::Tensor w = kept_rows.select(1, i).index_select(0, r.rows).unsqueeze(1);
    mixed.index_add_(0, r.rows, r.out * w.to(x.scalar_type()));
  }
  out = out + mixed.view({b, t, d}) / static_cast<double>(o_.top_k());
  // CV² of the blocks' importance I_i = Σ_t w_{t,i} over the batch (population
  // variance over the routed blocks).
  {
    AutocastOff fp32(x.device());
    const torch::Tensor importance = kept_rows.sum(0);
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
