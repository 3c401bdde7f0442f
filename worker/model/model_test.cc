#include "worker/model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/model/precision.h"
#include "worker/model/routed_layer.h"

namespace xmod {
namespace {

ModelShape Shape(Family family, int64_t layers, int64_t stride, double capacity) {
  ModelShape s;
  s.family = family;
  s.d_model = 32;
  s.n_heads = 4;
  s.n_layers = layers;
  s.d_ff = DefaultDff(32);
  s.vocab_size = 50;
  s.context = 16;
  s.stride = stride;
  s.capacity = capacity;
  return s;
}

Decoder Build(const ModelShape& s, bool recompute = false) {
  torch::manual_seed(7);
  return Decoder(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                     .family(s.family)
                     .stride(s.stride)
                     .routed_tokens(RoutedTokens(s.capacity, s.context))
                     .balance_coef(0.01)
                     .router_coef(0.01)
                     .recompute(recompute));
}

class ParamCount : public ::testing::TestWithParam<ModelShape> {};

TEST_P(ParamCount, ModuleHoldsExactlyWhatTheAccountingPredicts) {
  const ModelShape s = GetParam();
  Decoder model = Build(s);
  EXPECT_EQ(CountModuleParameters(*model), CountParams(s).all());
}

INSTANTIATE_TEST_SUITE_P(
    Families, ParamCount,
    ::testing::Values(Shape(Family::kDense, 3, 1, 1.0), Shape(Family::kMod, 4, 2, 0.125),
                      Shape(Family::kXmod, 4, 2, 0.5), Shape(Family::kXmod, 7, 3, 0.25),
                      Shape(Family::kXmod, 9, 4, 0.125), Shape(Family::kXmod, 5, 8, 0.75)));

TEST(Decoder, ShapesHoldForFullAndShorterSequences) {
  Decoder model = Build(Shape(Family::kXmod, 4, 2, 0.5));
  for (int64_t t : {16, 9}) {
    auto out = model->forward(torch::randint(0, 50, {3, t}));
    EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{3, t, 50}));
    EXPECT_EQ(out.aux_loss.dim(), 0);
  }
}

TEST(Decoder, EveryParameterReceivesAGradient) {
  for (const ModelShape& s : {Shape(Family::kXmod, 4, 2, 0.5), Shape(Family::kMod, 4, 2, 0.125),
                              Shape(Family::kDense, 2, 1, 1.0)}) {
    Decoder model = Build(s);
    const torch::Tensor tokens = torch::randint(0, 50, {4, 16});
    auto out = model->forward(tokens);
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(out.logits.reshape({-1, 50}), tokens.reshape({-1})) +
        out.aux_loss;
    loss.backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << FamilyName(s.family) << " " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0)
          << FamilyName(s.family) << " " << p.key();
    }
  }
}

// With capacity 1 every token is selected in order, so a routed layer is the dense
// block scaled by the gate: x + γ/sqrt(s−1) · sigmoid(r) · Δ(x).
TEST(Decoder, ARoutedLayerAtFullCapacityIsTheDenseBlockTimesTheGate) {
  ModelShape s = Shape(Family::kXmod, 2, 2, 1.0);
  Decoder model = Build(s);
  {
    torch::NoGradGuard no_grad;
    auto layer1 = std::dynamic_pointer_cast<RoutedLayerImpl>((*model->layers)[1]);
    layer1->gamma.fill_(1.7);
  }
  const torch::Tensor tokens = torch::randint(0, 50, {2, 16});
  auto out = model->forward(tokens);

  torch::NoGradGuard no_grad;
  auto layer0 = std::dynamic_pointer_cast<LayerImpl>((*model->layers)[0]);
  auto layer1 = std::dynamic_pointer_cast<RoutedLayerImpl>((*model->layers)[1]);
  const int64_t half = 32 / 4 / 2;
  const torch::Tensor positions = torch::arange(16, torch::kFloat64).unsqueeze(1);
  const torch::Tensor inv =
      torch::pow(10000.0, -torch::arange(half, torch::kFloat64) / double(half));
  const torch::Tensor angles = (positions * inv).unsqueeze(0);
  const torch::Tensor cos = angles.cos().to(torch::kFloat32),
                      sin = angles.sin().to(torch::kFloat32);
  torch::Tensor x = model->tok_emb(tokens);
  x = x + layer0->block->Delta(x, cos, sin);
  const torch::Tensor r = layer1->router(x).squeeze(-1);
  x = x +
      (1.7 / std::sqrt(1.0)) * torch::sigmoid(r).unsqueeze(-1) * layer1->block->Delta(x, cos, sin);
  const torch::Tensor expected = model->head(model->norm(x));
  EXPECT_TRUE(torch::allclose(out.logits, expected, 1e-5, 1e-5))
      << (out.logits - expected).abs().max().item<double>();
}

// Threshold routing decides each token from its own prefix, so changing later
// tokens cannot change earlier logits.
TEST(Decoder, ThresholdRoutingIsCausal) {
  Decoder model = Build(Shape(Family::kXmod, 4, 2, 0.25));
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randint(0, 50, {2, 16});
  torch::Tensor b = a.clone();
  b.narrow(1, 10, 6).random_(0, 50);
  auto la = model->forward(a, Routing::kThreshold).logits.narrow(1, 0, 10);
  auto lb = model->forward(b, Routing::kThreshold).logits.narrow(1, 0, 10);
  EXPECT_TRUE(torch::allclose(la, lb, 1e-6, 1e-6));
}

TEST(Decoder, DenseModelsHaveNoAuxiliaryLossAndFullDepth) {
  Decoder model = Build(Shape(Family::kDense, 2, 1, 1.0));
  auto out = model->forward(torch::randint(0, 50, {2, 16}));
  EXPECT_EQ(out.aux_loss.item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(out.depth_fraction.item<double>(), 1.0);
}

TEST(Decoder, TopKDepthFractionCountsAnchorsAndSelectedTokens) {
  // 4 layers, stride 2: anchors 0, 2 and routed 1, 3 at k = 4 of 16 -> (2 + 2·0.25) / 4.
  Decoder model = Build(Shape(Family::kXmod, 4, 2, 0.25));
  auto out = model->forward(torch::randint(0, 50, {2, 16}));
  EXPECT_NEAR(out.depth_fraction.item<double>(), 0.625, 1e-6);
}

TEST(Decoder, RoutedCountsAreKPerSequenceForTopKAndThePositiveRoutersForThreshold) {
  Decoder model = Build(Shape(Family::kXmod, 4, 2, 0.25));  // routed layers 1, 3; k = 4 of 16
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(0, 50, {3, 16});
  auto top = model->forward(tokens, Routing::kTopK);
  EXPECT_EQ(top.routed_counts.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(top.routed_counts[0].item<double>(), 12.0);
  EXPECT_EQ(top.routed_counts[1].item<double>(), 12.0);
  // Threshold routing: layer 1 sees the embeddings, so its count is computable here.
  auto layer1 = std::dynamic_pointer_cast<RoutedLayerImpl>((*model->layers)[1]);
  auto layer0 = std::dynamic_pointer_cast<LayerImpl>((*model->layers)[0]);
  auto threshold = model->forward(tokens, Routing::kThreshold);
  const torch::Tensor cos = model->named_buffers()["rope_cos"].unsqueeze(0);
  const torch::Tensor sin = model->named_buffers()["rope_sin"].unsqueeze(0);
  torch::Tensor x = model->tok_emb(tokens);
  x = x + layer0->block->Delta(x, cos, sin);
  const double positive =
      (torch::sigmoid(layer1->router(x).squeeze(-1)) > 0.5).sum().item<double>();
  EXPECT_EQ(threshold.routed_counts[0].item<double>(), positive);
  EXPECT_EQ(Build(Shape(Family::kDense, 2, 1, 1.0))->forward(tokens).routed_counts.numel(), 0);
}

TEST(Decoder, InitDepthCountsTheRoutedLayersBetweenTwoAnchorsAsOne) {
  auto depth = [](Family family, int64_t layers, int64_t stride) {
    return InitDepth(DecoderOptions(50, 32, 4, layers, 96, 16).family(family).stride(stride));
  };
  EXPECT_DOUBLE_EQ(depth(Family::kDense, 6, 1), 6.0);
  EXPECT_DOUBLE_EQ(depth(Family::kXmod, 129, 8), 33.0);  // 17 anchors + 112 / 7
  EXPECT_DOUBLE_EQ(depth(Family::kXmod, 4, 2), 4.0);     // 2 anchors + 2 / 1
  EXPECT_DOUBLE_EQ(depth(Family::kXmod, 7, 3), 5.0);     // 3 anchors + 4 / 2
  EXPECT_DOUBLE_EQ(depth(Family::kMod, 8, 2), 8.0);      // sigmoid-gated: each counts 1
}

// The weights are set module by module (InitWeights); they must be what the
// earlier rule, one pass over named_parameters() choosing the scale by the
// parameter's name, drew from the same generator state.
void InitByName(DecoderImpl& model) {
  torch::NoGradGuard no_grad;
  const double std = model.options().init_std();
  const double out_std = std / std::sqrt(2.0 * InitDepth(model.options()));
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos) {
      p.fill_(1.0);
    } else if (name.find("gamma") != std::string::npos) {
      p.fill_(1.0);
    } else if (name.find("expert_scale") != std::string::npos) {
      p.fill_(kDecoScaleInit);
    } else if (name.find("proj") != std::string::npos || name.find(".w2") != std::string::npos ||
               name.find(".down.") != std::string::npos) {
      p.normal_(0.0, out_std);
    } else {
      p.normal_(0.0, std);
    }
  }
}

TEST(Decoder, ModuleByModuleInitialisationDrawsWhatTheRuleByNameDrew) {
  std::vector<DecoderOptions> all;
  for (const ModelShape& s : {Shape(Family::kDense, 3, 1, 1.0), Shape(Family::kXmod, 7, 3, 0.25),
                              Shape(Family::kMod, 4, 2, 0.5)}) {
    all.push_back(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                      .family(s.family)
                      .stride(s.stride)
                      .routed_tokens(RoutedTokens(s.capacity, s.context)));
  }
  all.push_back(DecoderOptions(50, 32, 4, 3, DefaultDff(32), 16)
                    .family(Family::kMoe)
                    .experts(ExpertShape{4, 2, 16, 1, 0, 1, 0.0}));
  all.push_back(DecoderOptions(50, 32, 4, 3, DefaultDff(32), 16)
                    .family(Family::kDeco)
                    .experts(ExpertShape{4, 0, 8, 0, 24, 1, 0.2}));
  for (const DecoderOptions& o : all) {
    Decoder by_module(o), by_name(o);
    torch::manual_seed(11);
    by_module->reset_parameters();
    torch::manual_seed(11);
    InitByName(*by_name);
    const auto a = by_module->named_parameters(), b = by_name->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].value(), b[i].value()))
          << FamilyName(o.family()) << " " << a[i].key();
    }
  }
}

// A deep FLOP-matched X-MoD model must start with its residual stream at the scale
// of the dense model it is matched to. Initialising by all L layers (the old rule)
// shrank the anchors' branches by sqrt(L / depth) ≈ 2, so what the blocks add to
// the embedding came out at ≈ 0.33 of the dense model's (measured with LibTorch
// 1.13 on CPU); by depth it is ≈ 0.68, the rest being routed layers that see 1/8
// of the tokens through a gate sigmoid(r)·γ/sqrt(7) ≈ 0.19. The whole stream,
// embedding (std 0.02) included, is within a few percent under either rule.
TEST(Decoder, DeepFlopMatchedXmodStartsWithTheResidualScaleOfItsDenseModel) {
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 256, {8, 64});
  struct Rms {
    double stream, added;
  };
  auto measure = [&](const ModelShape& s) {
    torch::manual_seed(7);
    Decoder model(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                      .family(s.family)
                      .stride(s.stride)
                      .routed_tokens(RoutedTokens(s.capacity, s.context)));
    torch::NoGradGuard no_grad;
    const torch::Tensor x = model->forward(tokens).hidden;
    const torch::Tensor added = x - model->tok_emb(tokens);
    return Rms{x.pow(2).mean().sqrt().item<double>(), added.pow(2).mean().sqrt().item<double>()};
  };
  for (int64_t dense_layers : {4, 32}) {
    ModelShape dense;
    dense.family = Family::kDense;
    dense.d_model = 64;
    dense.n_heads = 4;
    dense.n_layers = dense_layers;
    dense.d_ff = DefaultDff(64);
    dense.vocab_size = 256;
    dense.context = 64;
    ModelShape sparse = dense;
    sparse.family = Family::kXmod;
    sparse.stride = 8;
    sparse.capacity = 0.125;  // σ = 0.875
    auto layers = LayersMatchingFlops(sparse, ForwardFlopsPerToken(dense));
    ASSERT_TRUE(layers.ok()) << layers.status();
    sparse.n_layers = *layers;  // 16 for L0 = 4, 144 for L0 = 32
    const Rms d = measure(dense), x = measure(sparse);
    std::printf("L0 %lld -> X-MoD L %lld: stream RMS ratio %.3f, added RMS ratio %.3f\n",
                static_cast<long long>(dense_layers), static_cast<long long>(sparse.n_layers),
                x.stream / d.stream, x.added / d.added);
    EXPECT_GT(x.stream / d.stream, 1.0 / 1.5);
    EXPECT_LT(x.stream / d.stream, 1.5);
    EXPECT_GT(x.added / d.added, 0.5) << "L0 " << dense_layers;
    EXPECT_LT(x.added / d.added, 2.0) << "L0 " << dense_layers;
  }
}

// The fused path (scaled_dot_product_attention) and the eager one compute the
// same function: on the same weights and tokens, logits and every parameter's
// gradient agree to float rounding, for dense blocks, routed blocks on the
// gathered tokens (causal = the plain triangle) and threshold routing (a mask).
struct PathCase {
  const char* name;
  Family family;
  int64_t layers, stride;
  double capacity;
  Routing routing;
};
void PrintTo(const PathCase& c, std::ostream* os) { *os << c.name; }

class AttentionPaths : public ::testing::TestWithParam<PathCase> {
 protected:
  void TearDown() override { SetAttentionPath(AttentionPath::kAuto); }
};

TEST_P(AttentionPaths, FusedAndEagerGiveTheSameOutputsAndGradients) {
  // The default takes the fused path in fp32 where there is one, and eager on CPU
  // under bf16 autocast (measured faster there).
  EXPECT_EQ(ResolvedAttentionPath(torch::kCPU),
            HaveFusedAttention() ? AttentionPath::kFused : AttentionPath::kEager);
  {
    Autocast amp(torch::kCPU, true);
    EXPECT_EQ(ResolvedAttentionPath(torch::kCPU), AttentionPath::kEager);
  }
  if (!HaveFusedAttention()) {
    EXPECT_THROW(SetAttentionPath(AttentionPath::kFused), c10::Error);
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no scaled_dot_product_attention";
  }
  const PathCase c = GetParam();
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 50, {3, 16});
  std::vector<torch::Tensor> logits, grads;
  for (AttentionPath path : {AttentionPath::kEager, AttentionPath::kFused}) {
    SetAttentionPath(path);
    Decoder model = Build(Shape(c.family, c.layers, c.stride, c.capacity));  // same seed
    DecoderOutput out = model->forward(tokens, c.routing);
    (out.logits.square().mean() + out.aux_loss).backward();
    logits.push_back(out.logits.detach());
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) {
      g.push_back(p.grad().defined() ? p.grad().flatten() : torch::zeros({p.numel()}));
    }
    grads.push_back(torch::cat(g));
  }
  EXPECT_TRUE(torch::allclose(logits[0], logits[1], 1e-5, 1e-5))
      << (logits[0] - logits[1]).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(grads[0], grads[1], 1e-4, 1e-6))
      << (grads[0] - grads[1]).abs().max().item<double>();
  EXPECT_GT(grads[0].abs().sum().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, AttentionPaths,
    ::testing::Values(PathCase{"Dense", Family::kDense, 2, 1, 1.0, Routing::kTopK},
                      PathCase{"XmodTopK", Family::kXmod, 4, 2, 0.25, Routing::kTopK},
                      PathCase{"XmodThreshold", Family::kXmod, 4, 2, 0.25, Routing::kThreshold},
                      PathCase{"ModTopK", Family::kMod, 4, 2, 0.5, Routing::kTopK}),
    [](const ::testing::TestParamInfo<PathCase>& info) { return std::string(info.param.name); });

// Recomputation changes memory, not values: with the same weights and tokens,
// the logits and every parameter's gradient equal those without it, in fp32 and
// under bf16 autocast (where the backward must recompute in bf16 as the forward
// ran: recomputing in fp32 would move the gradients by bf16 rounding, ~1e-2).
class Recompute : public ::testing::TestWithParam<PathCase> {};

TEST_P(Recompute, GivesTheSameOutputsAndGradients) {
  const PathCase c = GetParam();
  for (bool bf16 : {false, true}) {
    torch::manual_seed(5);
    const torch::Tensor tokens = torch::randint(0, 50, {3, 16});
    std::vector<torch::Tensor> logits, grads;
    for (bool recompute : {false, true}) {
      Decoder model = Build(Shape(c.family, c.layers, c.stride, c.capacity), recompute);
      DecoderOutput out;
      {
        Autocast amp(torch::kCPU, bf16);
        out = model->forward(tokens, c.routing);
      }
      (out.logits.to(torch::kFloat32).square().mean() + out.aux_loss).backward();
      logits.push_back(out.logits.detach().to(torch::kFloat32));
      std::vector<torch::Tensor> g;
      for (const auto& p : model->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key() << " recompute " << recompute;
        g.push_back(p.value().grad().flatten());
      }
      grads.push_back(torch::cat(g));
    }
    const double grad_scale = grads[0].abs().max().item<double>();
    ASSERT_GT(grad_scale, 0.0);
    EXPECT_TRUE(torch::equal(logits[0], logits[1])) << c.name << " bf16 " << bf16;
    EXPECT_LE((grads[0] - grads[1]).abs().max().item<double>(), 1e-6 * grad_scale)
        << c.name << " bf16 " << bf16;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, Recompute,
    ::testing::Values(PathCase{"Dense", Family::kDense, 2, 1, 1.0, Routing::kTopK},
                      PathCase{"XmodTopK", Family::kXmod, 4, 2, 0.25, Routing::kTopK},
                      PathCase{"XmodThreshold", Family::kXmod, 4, 2, 0.25, Routing::kThreshold},
                      PathCase{"ModTopK", Family::kMod, 4, 2, 0.5, Routing::kTopK}),
    [](const ::testing::TestParamInfo<PathCase>& info) { return std::string(info.param.name); });

// Under bf16 autocast the blocks compute in bf16 while the router stays fp32,
// and the top-k choice is the fp32 one except where two logits are tied to
// within the bf16 perturbation of the residual stream.
TEST(Decoder, Bf16AutocastKeepsTheRouterInFp32AndItsChoicesWhereNotTied) {
  Decoder model = Build(Shape(Family::kXmod, 4, 2, 0.25));
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  const torch::Tensor tokens = torch::randint(0, 50, {4, 16});
  const DecoderOutput fp32 = model->forward(tokens, Routing::kTopK);
  DecoderOutput bf16;
  {
    Autocast amp(torch::kCPU, true);
    EXPECT_TRUE(AutocastEnabled(torch::kCPU));
    bf16 = model->forward(tokens, Routing::kTopK);
  }
  EXPECT_FALSE(AutocastEnabled(torch::kCPU));  // restored
  EXPECT_EQ(bf16.logits.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf16.aux_loss.scalar_type(), torch::kFloat32);
  ASSERT_EQ(bf16.router_logits.size(), fp32.router_logits.size());
  ASSERT_FALSE(bf16.router_logits.empty());
  const int64_t k = RoutedTokens(0.25, 16);
  int64_t compared = 0;
  for (size_t l = 0; l < fp32.router_logits.size(); ++l) {
    const torch::Tensor a = fp32.router_logits[l], b = bf16.router_logits[l];
    EXPECT_EQ(b.scalar_type(), torch::kFloat32) << "layer " << l;
    const double noise = (a - b).abs().max().item<double>();
    const torch::Tensor kth = std::get<0>(a.topk(k, -1)).select(-1, k - 1);  // [B]
    const torch::Tensor in_a = torch::zeros_like(a).scatter(1, std::get<1>(a.topk(k, -1)), 1.0);
    const torch::Tensor in_b = torch::zeros_like(b).scatter(1, std::get<1>(b.topk(k, -1)), 1.0);
    for (int64_t row = 0; row < a.size(0); ++row) {
      for (int64_t j = 0; j < a.size(1); ++j) {
        ++compared;
        if (in_a[row][j].item<double>() == in_b[row][j].item<double>()) continue;
        // A different choice only at a near-tie with the k-th largest logit.
        EXPECT_LE(std::abs(a[row][j].item<double>() - kth[row].item<double>()), 2 * noise + 1e-6)
            << "layer " << l << " row " << row << " token " << j;
      }
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_TRUE(torch::allclose(bf16.logits.to(torch::kFloat32), fp32.logits, 0.05, 0.05))
      << (bf16.logits.to(torch::kFloat32) - fp32.logits).abs().max().item<double>();
}

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

// A Mixture-of-Layers decoder: d 32 with heads of 8, 3 stages of 1 shared and top-2
// of 4 routed thin blocks of width 16.
ModelShape MolShape(bool deltanet) {
  ModelShape s = Shape(Family::kMol, 3, 1, 1.0);
  s.mol = {16, 5, 1, 2, deltanet};
  return s;
}

Decoder BuildMol(const ModelShape& s) {
  torch::manual_seed(7);
  return Decoder(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                     .family(s.family)
                     .balance_coef(0.05)
                     .mol(s.mol));
}

TEST(MolDecoder, HoldsExactlyWhatTheAccountingCountsAndTrainsEveryParameter) {
  for (bool deltanet : {true, false}) {
    const ModelShape s = MolShape(deltanet);
    Decoder model = BuildMol(s);
    EXPECT_EQ(CountModuleParameters(*model), CountParams(s).all()) << deltanet;
    torch::manual_seed(3);
    // Batches large enough that every routed block gets tokens.
    const DecoderOutput out = model->forward(torch::randint(0, 50, {4, 16}));
    EXPECT_GT(out.aux_loss.item<double>(), 0.0);  // α · CV², positive unless perfectly balanced
    const torch::Tensor ce = torch::nn::functional::cross_entropy(out.logits.reshape({-1, 50}),
                                                                  torch::randint(0, 50, {64}));
    (ce + out.aux_loss).backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
    }
  }
}

TEST(MolDecoder, IsCausal) {
  Decoder model = BuildMol(MolShape(true));
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::randint(0, 50, {2, 16});
  torch::Tensor b = a.clone();
  b.narrow(1, 10, 6).random_(0, 50);
  auto la = model->forward(a).logits.narrow(1, 0, 10);
  auto lb = model->forward(b).logits.narrow(1, 0, 10);
  EXPECT_TRUE(torch::allclose(la, lb, 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(model->forward(a).logits, model->forward(b).logits, 1e-6, 1e-6));
}

}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

// A gdn decoder (issue 33): d 32 with heads of 8 over 4 layers, every layer Gated
// DeltaNet (softmax_every 0) or a hybrid keeping softmax in layers 1 and 3 (2).
Decoder BuildGdn(int64_t softmax_every) {
  const ModelShape s = Shape(Family::kGdn, 4, 1, 1.0);
  torch::manual_seed(7);
  return Decoder(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                     .family(Family::kGdn)
                     .softmax_every(softmax_every));
}

TEST(GdnDecoder, HoldsExactlyWhatTheAccountingCountsAndTrainsEveryParameter) {
  for (int64_t m : {0, 2}) {
    ModelShape s = Shape(Family::kGdn, 4, 1, 1.0);
    s.softmax_every = m;
    Decoder model = BuildGdn(m);
    EXPECT_EQ(CountModuleParameters(*model), CountParams(s).all()) << m;
    // The hybrid's layers 1 and 3 are softmax attention, the others DeltaNet.
    int64_t deltanet = 0;
    for (const auto& p : model->named_parameters())
      deltanet += p.key().find("A_log") != std::string::npos;
    EXPECT_EQ(deltanet, m == 0 ? 4 : 2) << m;
    torch::manual_seed(3);
    const DecoderOutput out = model->forward(torch::randint(0, 50, {2, 16}));
    torch::nn::functional::cross_entropy(out.logits.reshape({-1, 50}), torch::randint(0, 50, {32}))
        .backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
    }
  }
  // A DeltaNet layer's FLOPs do not grow with T; a softmax layer's do.
  ModelShape s = Shape(Family::kGdn, 4, 1, 1.0);
  ModelShape longer = s;
  longer.context = 4 * s.context;
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(longer), ForwardFlopsPerToken(s));
  s.softmax_every = longer.softmax_every = 2;
  EXPECT_GT(ForwardFlopsPerToken(longer), ForwardFlopsPerToken(s));
}

TEST(GdnDecoder, IsCausal) {
  for (int64_t m : {0, 2}) {
    Decoder model = BuildGdn(m);
    torch::NoGradGuard no_grad;
    torch::Tensor a = torch::randint(0, 50, {2, 16});
    torch::Tensor b = a.clone();
    b.narrow(1, 10, 6).random_(0, 50);
    auto la = model->forward(a).logits.narrow(1, 0, 10);
    auto lb = model->forward(b).logits.narrow(1, 0, 10);
    EXPECT_TRUE(torch::allclose(la, lb, 1e-6, 1e-6)) << m;
    EXPECT_FALSE(torch::allclose(model->forward(a).logits, model->forward(b).logits, 1e-6, 1e-6));
  }
}

}  // namespace
}  // namespace xmod
