#include "worker/model/gated_deltanet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/model/precision.h"

namespace xmod {
namespace {

// ‖x − y‖_rms / ‖x‖_rms.
double RelativeRms(const torch::Tensor& x, const torch::Tensor& y) {
  const torch::Tensor a = x.to(torch::kFloat64), b = y.to(torch::kFloat64);
  return ((a - b).pow(2).mean().sqrt() / a.pow(2).mean().sqrt().clamp_min(1e-300)).item<double>();
}

// Inputs drawn as the paper's code tests its kernels: q and k L2-normalised, β in
// (0.5, 0.73), g = log sigmoid(U(0, 1)) / 16 with a quarter of it masked to 0.
struct Inputs {
  torch::Tensor q, k, v, g, beta, h0;
  std::vector<torch::Tensor> all() const { return {q, k, v, g, beta, h0}; }
};

Inputs Draw(int64_t b, int64_t h, int64_t t, int64_t dk, int64_t dv, uint64_t seed) {
  torch::manual_seed(seed);
  Inputs in;
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  in.q = unit(torch::randn({b, h, t, dk})).requires_grad_();
  in.k = unit(torch::randn({b, h, t, dk})).requires_grad_();
  in.v = torch::randn({b, h, t, dv}).requires_grad_();
  in.beta = torch::sigmoid(torch::rand({b, h, t})).requires_grad_();
  const torch::Tensor keep = torch::rand({b, h, t}) > 0.25;
  in.g = (torch::log_sigmoid(torch::rand({b, h, t})) / 16.0 * keep).requires_grad_();
  in.h0 = (0.1 * torch::randn({b, h, dk, dv})).requires_grad_();
  return in;
}

TEST(GatedDeltaRule, ChunkedEqualsRecurrentInOutputsStateAndGradients) {
  // T = 100 is not a multiple of the chunk (64): the last chunk is padded.
  const Inputs in = Draw(2, 3, 100, 16, 24, 1);
  const double scale = 1.0 / 4.0;
  const DeltaRuleResult ref =
      GatedDeltaRuleRecurrent(in.q, in.k, in.v, in.g, in.beta, scale, in.h0);
  const DeltaRuleResult chk =
      GatedDeltaRuleChunked(in.q, in.k, in.v, in.g, in.beta, scale, in.h0, 64);
  EXPECT_LE(RelativeRms(ref.out, chk.out), 1e-5);
  EXPECT_LE(RelativeRms(ref.state, chk.state), 1e-5);
  // Gradients of a loss that reads every output and the final state.
  torch::manual_seed(9);
  const torch::Tensor wo = torch::randn_like(ref.out), ws = torch::randn_like(ref.state);
  auto grads = [&](const DeltaRuleResult& r) {
    const torch::Tensor loss = (r.out * wo).sum() + (r.state * ws).sum();
    return torch::autograd::grad({loss}, in.all());
  };
  const auto gr = grads(ref), gc = grads(chk);
  const char* names[] = {"q", "k", "v", "g", "beta", "h0"};
  for (size_t i = 0; i < gr.size(); ++i) {
    EXPECT_LE(RelativeRms(gr[i], gc[i]), 1e-5) << names[i];
  }
  // A chunk of one token is the recurrence itself; a chunk longer than T is one chunk.
  for (int64_t c : {1, 7, 128}) {
    const DeltaRuleResult other =
        GatedDeltaRuleChunked(in.q, in.k, in.v, in.g, in.beta, scale, in.h0, c);
    EXPECT_LE(RelativeRms(ref.out, other.out), 1e-5) << "chunk " << c;
    EXPECT_LE(RelativeRms(ref.state, other.state), 1e-5) << "chunk " << c;
  }
}

TEST(GatedDeltaRule, TheStateCarriesAcrossCalls) {
  torch::NoGradGuard no_grad;
  const Inputs in = Draw(1, 2, 90, 8, 8, 2);
  for (bool chunked : {false, true}) {
    auto rule = [&](int64_t from, int64_t to, const torch::Tensor& h) {
      auto s = [&](const torch::Tensor& x) { return x.narrow(2, from, to - from); };
      return chunked
                 ? GatedDeltaRuleChunked(s(in.q), s(in.k), s(in.v), s(in.g), s(in.beta), 0.3, h, 16)
                 : GatedDeltaRuleRecurrent(s(in.q), s(in.k), s(in.v), s(in.g), s(in.beta), 0.3, h);
    };
    const DeltaRuleResult whole = rule(0, 90, in.h0);
    const DeltaRuleResult first = rule(0, 37, in.h0);
    const DeltaRuleResult second = rule(37, 90, first.state);
    EXPECT_LE(RelativeRms(whole.out, torch::cat({first.out, second.out}, 2)), 1e-6) << chunked;
    EXPECT_LE(RelativeRms(whole.state, second.state), 1e-6) << chunked;
    // Without the carried state the second half differs.
    EXPECT_GT(RelativeRms(whole.state, rule(37, 90, {}).state), 1e-3) << chunked;
  }
}

// With no decay (g = 0) and full writes (β = 1), writing orthonormal keys k_i
// with values v_i and then reading with q = k_j returns v_j: each write replaces
// what the state held along its key and leaves the other keys alone.
TEST(GatedDeltaRule, OrthonormalKeysAreRecalledExactly) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const int64_t dk = 8, dv = 5, n = 6;
  const torch::Tensor basis = std::get<0>(torch::linalg_qr(torch::randn({dk, dk})));  // columns
  const torch::Tensor keys = basis.t().narrow(0, 0, n);                               // [n, K]
  const torch::Tensor values = torch::randn({n, dv});
  // Tokens 0..n-1 write; tokens n..2n-1 read key j = t - n (k = 0, β = 0: no write).
  torch::Tensor q = torch::zeros({1, 1, 2 * n, dk}), k = torch::zeros({1, 1, 2 * n, dk});
  torch::Tensor v = torch::zeros({1, 1, 2 * n, dv}), beta = torch::zeros({1, 1, 2 * n});
  k[0][0].narrow(0, 0, n).copy_(keys);
  v[0][0].narrow(0, 0, n).copy_(values);
  beta[0][0].narrow(0, 0, n).fill_(1.0);
  q[0][0].narrow(0, n, n).copy_(keys);
  const torch::Tensor g = torch::zeros({1, 1, 2 * n});
  for (bool chunked : {false, true}) {
    const DeltaRuleResult r = chunked ? GatedDeltaRuleChunked(q, k, v, g, beta, 1.0, {}, 4)
                                      : GatedDeltaRuleRecurrent(q, k, v, g, beta, 1.0);
    const torch::Tensor read = r.out[0][0].narrow(0, n, n);
    EXPECT_LT((read - values).abs().max().item<double>(), 1e-5) << chunked;
    // Overwriting key 0 with a new value replaces it.
    const torch::Tensor q2 = q.clone(), v2 = v.clone();
    v2[0][0][1].copy_(values[4]);
    torch::Tensor k2 = k.clone();
    k2[0][0][1].copy_(keys[0]);  // token 1 writes key 0 again, with value 4
    const DeltaRuleResult over = chunked ? GatedDeltaRuleChunked(q2, k2, v2, g, beta, 1.0, {}, 4)
                                         : GatedDeltaRuleRecurrent(q2, k2, v2, g, beta, 1.0);
    EXPECT_LT((over.out[0][0][n] - values[4]).abs().max().item<double>(), 1e-5) << chunked;
  }
  // β = 0 everywhere: nothing is written, and a zero state reads 0.
  const DeltaRuleResult none =
      GatedDeltaRuleChunked(q, k, v, g, torch::zeros_like(beta), 1.0, {}, 4);
  EXPECT_EQ(none.out.abs().max().item<double>(), 0.0);
}

GatedDeltaNet SmallLayer(int64_t d, int64_t heads, uint64_t seed, int64_t chunk = 16) {
  torch::manual_seed(seed);
  GatedDeltaNet layer(GatedDeltaNetOptions(d, heads).chunk(chunk));
  torch::NoGradGuard no_grad;
  layer->InitWeights(InitScales{0.02, 0.01});
  return layer;
}

TEST(GatedDeltaNetLayer, OutputsAtOrBeforeAPositionIgnoreLaterTokens) {
  torch::NoGradGuard no_grad;
  GatedDeltaNet layer = SmallLayer(32, 4, 4);
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, 50, 32});
  const int64_t t = 20;
  torch::Tensor changed = x.clone();
  changed.narrow(1, t + 1, 50 - t - 1).add_(torch::randn({2, 50 - t - 1, 32}));
  const torch::Tensor a = layer->forward(x, {}), b = layer->forward(changed, {});
  EXPECT_LT((a.narrow(1, 0, t + 1) - b.narrow(1, 0, t + 1)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((a.narrow(1, t + 1, 1) - b.narrow(1, t + 1, 1)).abs().max().item<double>(), 1e-5);
}

TEST(GatedDeltaNetLayer, ChunkedAndRecurrentLayersAgreeAndTheMaskIsRefused) {
  GatedDeltaNet chunked = SmallLayer(32, 2, 6);
  GatedDeltaNet recurrent(GatedDeltaNetOptions(32, 2).recurrent(true));
  {
    torch::NoGradGuard no_grad;
    auto from = chunked->named_parameters();
    for (auto& p : recurrent->named_parameters()) p.value().copy_(from[p.key()]);
  }
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({1, 40, 32});
  EXPECT_LE(RelativeRms(recurrent->forward(x, {}), chunked->forward(x, {})), 1e-5);
  TokenPositions masked;
  masked.allowed = torch::ones({1, 1, 40, 40}, torch::kBool);
  EXPECT_THROW(chunked->forward(x, masked), c10::Error);
}

TEST(GatedDeltaNetLayer, TheDecayStaysInItsRangeAndStartsAtThePapersTimeSteps) {
  GatedDeltaNet layer = SmallLayer(64, 4, 8);
  torch::NoGradGuard no_grad;
  // softplus(dt_bias) is the initial dt, drawn log-uniformly from [1e-3, 0.1].
  const torch::Tensor dt = torch::softplus(layer->dt_bias);
  EXPECT_GE(dt.min().item<double>(), 1e-3 * (1 - 1e-4));
  EXPECT_LE(dt.max().item<double>(), 0.1 * (1 + 1e-4));
  // A = exp(A_log) within (0, 16].
  EXPECT_GT(layer->A_log.exp().min().item<double>(), 0.0);
  EXPECT_LE(layer->A_log.exp().max().item<double>(), 16.0);
  // α = exp(g) in (0, 1] for inputs of every scale the stream may carry.
  torch::manual_seed(9);
  for (double s : {1e-3, 1.0, 5.0}) {
    const torch::Tensor g = layer->LogDecay(s * torch::randn({2, 30, 64}));
    EXPECT_LE(g.max().item<double>(), 0.0);
    EXPECT_GT(g.exp().min().item<double>(), 0.0) << s;
    EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
  }
  // A_log and dt_bias are one-dimensional: the trainer's rule (dim >= 2 decays)
  // keeps them out of weight decay, as the paper's code does.
  EXPECT_EQ(layer->A_log.dim(), 1);
  EXPECT_EQ(layer->dt_bias.dim(), 1);
}

TEST(GatedDeltaNetLayer, Bf16TracksFp32AndTheRuleKeepsItsStateInFp32) {
  GatedDeltaNet layer = SmallLayer(64, 4, 10);
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({2, 70, 64});
  const torch::Tensor full = layer->forward(x, {});
  torch::Tensor state;
  torch::Tensor half;
  {
    Autocast bf16(torch::Device(torch::kCPU), true);
    half = layer->Run(x, {}, &state);
  }
  EXPECT_EQ(state.scalar_type(), torch::kFloat32);
  // bf16 carries 8 significant bits: the projections' rounding stays within 3%.
  EXPECT_LE(RelativeRms(full, half), 0.03);
}

}  // namespace
}  // namespace xmod
