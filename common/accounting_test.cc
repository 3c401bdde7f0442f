#include "common/accounting.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <tuple>

#include "common/mol_accounting.h"

namespace xmod {
namespace {

ModelShape Tiny(Family family, int64_t layers, int64_t stride, double capacity, int64_t context) {
  ModelShape s;
  s.family = family;
  s.d_model = 64;
  s.n_heads = 4;
  s.n_layers = layers;
  s.d_ff = DefaultDff(64);
  s.vocab_size = 256;
  s.context = context;
  s.stride = stride;
  s.capacity = capacity;
  return s;
}

TEST(Accounting, DefaultDffRoundsEightThirdsUpToSixteen) {
  EXPECT_EQ(DefaultDff(64), 176);    // 170.67 -> 176
  EXPECT_EQ(DefaultDff(256), 688);   // 682.67 -> 688
  EXPECT_EQ(DefaultDff(768), 2048);  // exactly 2048
  EXPECT_EQ(DefaultDff(48), 128);    // exactly 128
}

// Dense, d=64, 4 heads, 2 layers, d_ff=176, V=256, T=128.
//   per layer params: 4·64² = 16384, 3·64·176 = 33792, norms 2·64 = 128  -> 50304
//   N_total = 2·50304 + final norm 64 = 100672; embedding = head = 256·64 = 16384
//   per layer FLOPs: 2·(16384 + 33792) = 100352, attention 4·128·64 = 32768 -> 133120
//   forward = 2·133120 + head 2·64·256 = 32768 -> 299008; training = 897024
TEST(Accounting, DenseTwoLayerModelMatchesHandCount) {
  const ModelShape s = Tiny(Family::kDense, 2, 1, 1.0, 128);
  const ParamCount p = CountParams(s);
  EXPECT_EQ(p.non_embedding, 100672);
  EXPECT_EQ(p.embedding, 16384);
  EXPECT_EQ(p.head, 16384);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(s), 299008.0);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(s), 897024.0);
  EXPECT_EQ(ActiveParams(s, 2), 100672);
}

// X-MoD, 4 layers, stride 2 (layers 0, 2 anchors; 1, 3 routed), capacity 0.25, T=128:
//   k = 32, ρ = 0.25
//   routed layer FLOPs: 0.25·100352 = 25088, 0.0625·32768 = 2048, router 2·64 = 128 -> 27264
//   forward = 2·133120 + 2·27264 + 32768 = 353536
//   params = 4·50304 + 2·(router 64 + gate 1) + final norm 64 = 201410
//   N_active (L0 = 2) = 100672 · 353536 / 299008 = 119031.2... -> 119031
TEST(Accounting, XmodStrideTwoQuarterCapacityMatchesHandCount) {
  const ModelShape s = Tiny(Family::kXmod, 4, 2, 0.25, 128);
  EXPECT_EQ(NumRoutedLayers(s), 2);
  EXPECT_EQ(RoutedTokens(0.25, 128), 32);
  EXPECT_EQ(CountParams(s).non_embedding, 201410);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(s), 353536.0);
  EXPECT_EQ(ActiveParams(s, 2), 119031);
}

// MoD, 4 layers, stride 2, capacity 0.125, T=64: k = 8
//   dense layer FLOPs: 100352 + 4·64·64 = 116736
//   routed layer FLOPs: 0.125·100352 = 12544, 0.015625·16384 = 256, router 128 -> 12928
//   forward = 2·116736 + 2·12928 + 32768 = 292096
//   params = 4·50304 + 2·64 (routers, no gate) + 64 = 201408
TEST(Accounting, ModHasRoutersButNoGatesAndMatchesHandCount) {
  const ModelShape s = Tiny(Family::kMod, 4, 2, 0.125, 64);
  EXPECT_EQ(CountParams(s).non_embedding, 201408);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(s), 292096.0);
}

TEST(Accounting, FlopsAtTheNominalCapacityOfEveryRoutedLayerAreTheChargedFlops) {
  for (const ModelShape& s :
       {Tiny(Family::kXmod, 4, 2, 0.25, 128), Tiny(Family::kMod, 4, 2, 0.125, 64),
        Tiny(Family::kXmod, 129, 8, 0.125, 256), Tiny(Family::kDense, 3, 1, 1.0, 128)}) {
    const std::vector<double> nominal(static_cast<size_t>(NumRoutedLayers(s)),
                                      EffectiveCapacity(s));
    EXPECT_NEAR(ForwardFlopsPerTokenAt(s, nominal), ForwardFlopsPerToken(s),
                1e-12 * ForwardFlopsPerToken(s))
        << FamilyName(s.family) << " " << s.n_layers;
  }
}

// The X-MoD model of the hand count above with its two routed layers at 0.5 and 0:
//   0.5·100352 + 0.25·32768 + 128 = 58496; 0 + 0 + 128 = 128
//   forward = 2·133120 + 58496 + 128 + 32768 = 357632
TEST(Accounting, FlopsAtRealisedCapacitiesPriceEachRoutedLayerByItsOwn) {
  const ModelShape s = Tiny(Family::kXmod, 4, 2, 0.25, 128);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerTokenAt(s, {0.5, 0.0}), 357632.0);
}

// Stride 3 with 7 layers: anchors at 0, 3, 6 -> 4 routed layers.
TEST(Accounting, AnchorsFallOnMultiplesOfTheStride) {
  ModelShape s = Tiny(Family::kXmod, 7, 3, 0.5, 64);
  EXPECT_EQ(NumRoutedLayers(s), 4);
  EXPECT_TRUE(IsAnchorLayer(0, 3));
  EXPECT_FALSE(IsAnchorLayer(1, 3));
  EXPECT_TRUE(IsAnchorLayer(6, 3));
  s.stride = 1;
  EXPECT_EQ(NumRoutedLayers(s), 0);
}

TEST(Accounting, RoutedTokensNeverDropsBelowOne) {
  EXPECT_EQ(RoutedTokens(0.001, 64), 1);
  EXPECT_EQ(RoutedTokens(0.125, 256), 32);
  EXPECT_EQ(RoutedTokens(0.3, 10), 3);
}

TEST(Accounting, FlopMatchingPicksTheClosestLayerCount) {
  const ModelShape dense = Tiny(Family::kDense, 4, 1, 1.0, 128);
  const double target = ForwardFlopsPerToken(dense);
  ModelShape sparse = Tiny(Family::kXmod, 0, 2, 0.125, 128);
  auto layers = LayersMatchingFlops(sparse, target);
  ASSERT_TRUE(layers.ok()) << layers.status();
  sparse.n_layers = *layers;
  const double here = std::abs(ForwardFlopsPerToken(sparse) - target);
  for (int64_t other : {*layers - 1, *layers + 1}) {
    ModelShape o = sparse;
    o.n_layers = other;
    EXPECT_LE(here, std::abs(ForwardFlopsPerToken(o) - target)) << "layers " << other;
  }
  EXPECT_GT(*layers, 4);  // a sparse model needs more layers for the same compute
}

TEST(Accounting, FlopMatchingOfADenseShapeReturnsItsOwnDepth) {
  const ModelShape dense = Tiny(Family::kDense, 6, 1, 1.0, 128);
  auto layers = LayersMatchingFlops(dense, ForwardFlopsPerToken(dense));
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ(*layers, 6);
}

TEST(Accounting, BudgetsTurnIntoTokensAndSteps) {
  EXPECT_EQ(BudgetTokens(BudgetKind::kTokensPerParam, 20, 1000, 6000.0).value(), 20000);
  EXPECT_EQ(BudgetTokens(BudgetKind::kFlops, 6e9, 1000, 6000.0).value(), 1000000);
  EXPECT_EQ(BudgetTokens(BudgetKind::kTokens, 12345, 1000, 6000.0).value(), 12345);
  EXPECT_EQ(StepsFor(20000, 4096), 5);  // 4.88 -> 5
  EXPECT_EQ(StepsFor(8192, 4096), 2);
}

// Past 2^63 llround is unspecified (INT64_MIN on x86), and the old clamp to one
// token made any such budget a 1-token job. Up to 2^53 a budget is exact; past it,
// or below one token, it is refused.
TEST(Accounting, ABudgetPastTwoToThe53TokensIsRefusedNotWrappedToOneToken) {
  EXPECT_EQ(BudgetTokens(BudgetKind::kTokens, 9007199254740992.0, 1, 1.0).value(), kMaxCount);
  for (const auto& [kind, value, n] : {std::tuple{BudgetKind::kTokens, 1e30, int64_t{1}},
                                       {BudgetKind::kTokens, 9007199254740994.0, int64_t{1}},
                                       {BudgetKind::kTokensPerParam, 1e18, int64_t{26784}},
                                       {BudgetKind::kTokensPerParam, 1e15, int64_t{26784}},
                                       {BudgetKind::kFlops, 1e40, int64_t{1}}}) {
    auto tokens = BudgetTokens(kind, value, n, 196608.0);
    ASSERT_FALSE(tokens.ok()) << value << " gave " << *tokens;
    EXPECT_NE(std::string(tokens.status().message()).find("more than 2^53 = 9007199254740992"),
              std::string::npos)
        << tokens.status();
  }
  auto none = BudgetTokens(BudgetKind::kFlops, 1000.0, 1, 196608.0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("less than one"), std::string::npos);
}

// A d_model near 2^32 used to wrap 4·d² to a wrong but plausible count.
TEST(Accounting, AModelWhoseParametersWouldWrapIsRefusedBeforeItIsCounted) {
  ModelShape s = Tiny(Family::kDense, 2, 1, 1.0, 128);
  EXPECT_TRUE(CheckModelSize(s).ok());
  s.d_model = int64_t{1} << 32;
  s.d_ff = DefaultDff(s.d_model);
  const absl::Status wide = CheckModelSize(s);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(std::string(wide.message()).find("more than 2^53"), std::string::npos) << wide;

  // Just under the bound the integer count is exact: it equals the formula in 128 bits.
  s.d_model = int64_t{1} << 20;
  s.d_ff = DefaultDff(s.d_model);
  s.n_layers = 600;
  ASSERT_TRUE(CheckModelSize(s).ok());
  const __int128 d = s.d_model;
  const __int128 expected = 600 * (4 * d * d + 3 * d * s.d_ff + 2 * d) + d;
  EXPECT_EQ(static_cast<__int128>(CountParams(s).non_embedding), expected);
  s.n_layers = 700;
  EXPECT_FALSE(CheckModelSize(s).ok());

  // Experts multiply: a million experts of a wide MLP is refused, not wrapped.
  ModelShape moe = Tiny(Family::kMoe, 64, 1, 1.0, 128);
  moe.d_model = 8192;
  moe.experts = ExpertShape{kMaxExperts, 2, kMaxHidden, 0, 0, 0, 0.0};
  EXPECT_FALSE(CheckModelSize(moe).ok());
  moe.experts.experts = 8;
  moe.experts.width = 1024;
  EXPECT_TRUE(CheckModelSize(moe).ok());
}

// Searching the expert count never computes a count that wraps: the walk stops at
// the first count past the target, compared in long double.
TEST(Accounting, ExpertSearchOnAWideModelRefusesInsteadOfWrapping) {
  ModelShape s = Tiny(Family::kMoe, 100000, 1, 1.0, 128);
  s.d_model = int64_t{1} << 20;
  s.experts = ExpertShape{0, 1024, kMaxHidden, 0, 0, 0, 0.0};
  auto e = ExpertsMatchingParams(s, int64_t{1} << 40);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("within a factor of 2"), std::string::npos);
}

TEST(Accounting, UnknownFamiliesAreRejected) {
  EXPECT_EQ(ParseFamily("xmod").value(), Family::kXmod);
  for (Family f :
       {Family::kDense, Family::kXmod, Family::kMod, Family::kMoe, Family::kDeco, Family::kMol}) {
    EXPECT_EQ(ParseFamily(FamilyName(f)).value(), f);
  }
  EXPECT_NE(ParseFamily("dens").status().message().find("unknown family"), std::string::npos);
}

// The MoL paper's published sizes through the references' formula (its
// counting convention: softmax thin blocks of 12·d_t² plus their projections,
// a router per stage, no norms, the tied embedding once).
TEST(MolAccounting, ThePapersConventionReproducesItsPublishedSizes) {
  // Table 1: d 1024, 8 stages of 5 blocks of 256, top-3, no shared block, 32K tied.
  const MolPaperCount t1 = MolPaperParams(1024, 256, 8, 5, 0, 3, 32000);
  EXPECT_EQ(t1.total, 52469760);  // 52.5M
  EXPECT_NEAR(static_cast<double>(t1.total + t1.embedding) / 1e6, 85.2, 0.05);
  // Table 5: d 2048, 24 stages of 1+3of15 of 512, GPT-2's vocabulary: 0.607B active.
  const MolPaperCount t5 = MolPaperParams(2048, 512, 24, 15, 1, 3, 50257);
  EXPECT_EQ(t5.active + t5.embedding, 606930944);
  // The projections' share of a thin block is d / (d + 6·d_t): 40% at d_t = 256, d = 1024.
  const double block = 12.0 * 256 * 256 + 2.0 * 1024 * 256;
  EXPECT_NEAR(2.0 * 1024 * 256 / block, 1024.0 / (1024 + 6 * 256), 1e-12);
}

ModelShape MolShapeOf(bool deltanet) {
  ModelShape s;
  s.family = Family::kMol;
  s.d_model = 64;
  s.n_heads = 4;  // head width 16
  s.n_layers = 3;
  s.d_ff = DefaultDff(64);
  s.vocab_size = 100;
  s.context = 128;
  s.mol = {32, 5, 1, 2, deltanet};
  return s;
}

TEST(MolAccounting, AStageCountsEveryBlockAndChargesTheSharedAndKRoutedOnes) {
  const ModelShape s = MolShapeOf(true);
  const int64_t ff = DefaultDff(32);  // 96
  const int64_t softmax_block = 2 * 64 * 32 + 2 * 32 + 4 * 32 * 32 + 3 * 32 * ff;
  const int64_t gdn_mixer = 5 * 32 * 32 + 2 * 32 * 2 + 12 * 32 + 2 * 2 + 16;
  EXPECT_EQ(DeltaNetMixerParams(32, 16), gdn_mixer);
  const int64_t gdn_block = 2 * 64 * 32 + 2 * 32 + gdn_mixer + 3 * 32 * ff;
  const int64_t stage = softmax_block + 4 * gdn_block + 64 * 4;
  EXPECT_EQ(CountParams(s).non_embedding, 3 * stage + 64);
  EXPECT_EQ(ActiveParams(s, 0), 3 * (softmax_block + 2 * gdn_block + 64 * 4) + 64);
  const Sparsity sparsity = SparsityOf(s, 0);
  EXPECT_DOUBLE_EQ(sparsity.expert, 1.0 - 2.0 / 4.0);
  EXPECT_NEAR(sparsity.parameter, 1.0 - double(ActiveParams(s, 0)) / CountParams(s).non_embedding,
              1e-12);
  // FLOPs: the DeltaNet core does not grow with T; the shared softmax block's
  // attention does, by 4·d_t per token per unit of T.
  ModelShape longer = s;
  longer.context = 256;
  EXPECT_NEAR(ForwardFlopsPerToken(longer) - ForwardFlopsPerToken(s), 3 * 4.0 * 32 * 128, 1e-6);
  // Routed softmax blocks attend over the f = k/(N − S) of the tokens routed to them.
  ModelShape softmax = MolShapeOf(false);
  ModelShape softmax_longer = softmax;
  softmax_longer.context = 256;
  EXPECT_NEAR(ForwardFlopsPerToken(softmax_longer) - ForwardFlopsPerToken(softmax),
              3 * (4.0 * 32 * 128 + 2 * 4.0 * 32 * 0.5 * 128), 1e-6);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(s), 3 * ForwardFlopsPerToken(s));
}

// A small shape (d = 32, 4 heads, d_ff = 96, V = 64) for the expert tests.
ModelShape Small(Family family, int64_t layers, int64_t context) {
  ModelShape s;
  s.family = family;
  s.d_model = 32;
  s.n_heads = 4;
  s.n_layers = layers;
  s.d_ff = 96;
  s.vocab_size = 64;
  s.context = context;
  return s;
}

// DECO's 0.1B layer (d = 768, E = 42 experts of 64, shared SwiGLU of 128) against
// its dense twin (d_ff = 1920), as the baselines reference works it out: 4.456M
// against 4.424M parameters per FFN (+0.7%).
TEST(Accounting, DecoLayerMatchesItsPublishedParameterCount) {
  ModelShape s;
  s.family = Family::kDeco;
  s.d_model = 768;
  s.d_ff = 1920;
  s.experts = ExpertShape{42, 0, 64, 0, 128, 1, 0.2};
  EXPECT_EQ(ExpertMlpParams(s), 32256 + 4128768 + 294912 + 42 + 64);
  EXPECT_NEAR(double(ExpertMlpParams(s)) / (3.0 * 768 * 1920), 1.0073, 1e-4);
  // Active per token at the target ratio: router, a fifth of the experts, shared.
  EXPECT_NEAR(ExpertMlpActiveParams(s), 32256 + 0.2 * 4128768 + 294912, 1e-6);
  // Training computes every expert: the FLOPs are twice the matmul parameters.
  EXPECT_EQ(ExpertMlpFlops(s), 2.0 * (32256 + 4128768 + 294912));
}

TEST(Accounting, MoeCountsEveryExpertButChargesOnlyTheRoutedOnes) {
  ModelShape s = Small(Family::kMoe, 2, 16);
  s.experts = ExpertShape{8, 2, 48, 1, 0, 0, 0.0};
  const int64_t attention = 4 * 32 * 32, norms = 2 * 32;
  const int64_t mlp = 32 * 8 + 3 * 32 * 48 * (8 + 1);
  EXPECT_EQ(CountParams(s).non_embedding, 2 * (attention + norms + mlp) + 32);
  const int64_t unused = 2 * 3 * 32 * 48 * (8 - 2);
  EXPECT_EQ(ActiveParams(s, 2), CountParams(s).non_embedding - unused);
  const ModelShape dense = DenseReference(s, 2);
  // Two routed and one shared expert of d_ff / 2: 1.5x the dense MLP, plus the router.
  EXPECT_NEAR(ForwardFlopsPerToken(s) - ForwardFlopsPerToken(dense),
              2.0 * (2 * 32 * 8 + 0.5 * 6.0 * 32 * 96), 1e-6);
  const Sparsity sp = SparsityOf(s, 2);
  EXPECT_NEAR(sp.expert, 0.75, 1e-12);
  EXPECT_NEAR(sp.parameter, double(unused) / double(CountParams(s).non_embedding), 1e-12);
  EXPECT_EQ(sp.token, 0.0);
  EXPECT_EQ(NumRoutedLayers(s), 0);
}

TEST(Accounting, ExpertsMatchingParamsTakesTheClosestWholeCount) {
  ModelShape s = Small(Family::kMoe, 2, 16);
  s.experts = ExpertShape{0, 2, 48, 0, 0, 0, 0.0};
  for (int64_t target : {30000, 40000, 50000, 100000}) {
    auto e = ExpertsMatchingParams(s, target);
    ASSERT_TRUE(e.ok()) << e.status();
    ModelShape at = s;
    at.experts.experts = *e;
    const int64_t n = CountParams(at).non_embedding;
    for (int64_t other : {*e - 1, *e + 1}) {
      if (other < 2) continue;
      at.experts.experts = other;
      EXPECT_GE(std::llabs(CountParams(at).non_embedding - target), std::llabs(n - target));
    }
  }
  // Even top_k experts are more than twice a tiny target: refused.
  EXPECT_FALSE(ExpertsMatchingParams(s, 1000).ok());
}

TEST(Accounting, TokenSparsityOfXmodIsOneMinusItsCapacity) {
  ModelShape s = Small(Family::kXmod, 5, 32);
  s.stride = 2;
  s.capacity = 0.5;
  const Sparsity sp = SparsityOf(s, 4);
  EXPECT_NEAR(sp.token, 0.5, 1e-12);
  EXPECT_EQ(sp.expert, 0.0);
  EXPECT_NEAR(sp.parameter, 1.0 - double(ActiveParams(s, 4)) / double(CountParams(s).non_embedding),
              1e-12);
  EXPECT_EQ(InferenceFlopsPerToken(s), ForwardFlopsPerToken(s));
}
}  // namespace
}  // namespace xmod

namespace xmod {
namespace {

TEST(FamilyTable, EveryFamilyHasOneRowAndItsNameRoundTrips) {
  for (Family f : {Family::kDense, Family::kXmod, Family::kMod, Family::kMoe, Family::kDeco,
                   Family::kMol, Family::kGdn}) {
    EXPECT_EQ(Traits(f).id, f);
    const absl::StatusOr<Family> parsed = ParseFamily(FamilyName(f));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(Families().size(), 7u);
  EXPECT_EQ(ParseFamily("moee").status().message(),
            "unknown family 'moee' (known: dense, xmod, mod, moe, deco, mol, gdn)");
  EXPECT_EQ(Traits(Family::kMol).routing, RoutingKind::kLayers);
  EXPECT_EQ(Traits(Family::kXmod).routing, RoutingKind::kDepth);
  EXPECT_TRUE(Traits(Family::kXmod).routed_gate);
  EXPECT_FALSE(Traits(Family::kMod).routed_gate);
  EXPECT_EQ(Traits(Family::kDeco).routing, RoutingKind::kExperts);
}

}  // namespace
}  // namespace xmod
