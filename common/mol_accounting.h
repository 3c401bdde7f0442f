// Parameter and FLOP accounting of Mixture of Layers (docs/mol.md) and of the
// Gated DeltaNet token mixer (docs/gated-deltanet.md), as xmod builds them; and
// the MoL paper's own counting convention, which reproduces its published sizes.
#ifndef XMOD_COMMON_MOL_ACCOUNTING_H_
#define XMOD_COMMON_MOL_ACCOUNTING_H_

#include <cstdint>

#include "common/accounting.h"

namespace xmod {

// A Gated DeltaNet mixer of width w with heads of head_dim (K = V = head_dim,
// H = w / head_dim, convolution width 4): q, k, v, gate and output projections
// 5w², decay and write-strength projections 2·w·H, convolution kernels 12w,
// A_log and dt_bias 2H, the gated RMSNorm's weight V.
int64_t DeltaNetMixerParams(int64_t width, int64_t head_dim);
// Its forward FLOPs per token: 2 × the projections' weights, the convolutions
// (2·4 per channel of q, k and v) and the delta rule's core, 7·K·V per head
// (docs/gated-deltanet.md). Does not depend on the context.
double DeltaNetMixerFlops(int64_t width, int64_t head_dim);

// One split stage of a mol shape: all its parameters, and those one token uses
// (the shared blocks, k routed blocks and the router).
struct MolStageCount {
  long double total = 0;
  double active = 0;
};
MolStageCount MolStageParams(const ModelShape& shape);
// Forward FLOPs per token of one stage at the shape's context: the matmuls of
// the shared and k routed blocks and of the router; softmax attention of a
// shared block 4·d_t·T; of a routed softmax block 4·d_t·f·T per routed token,
// f = k/(N − S) (it attends over the ≈ f·T tokens routed to it); a routed
// DeltaNet block its core and convolutions.
double MolStageFlops(const ModelShape& shape);

// The paper's convention (arXiv:2605.09516, as the references reconstruct it):
// a thin block is softmax attention 4·d_t² plus a non-gated 4× FFN 8·d_t² plus
// its projections 2·d·d_t, a router d·(N − S) per stage, no norms; the token
// embedding (tied with the head) counted once. Reproduces 52.5M non-embedding
// and 85.2M with a 32K tied embedding for Table 1 (d 1024, 8 stages of 5 blocks
// of 256, top-3), and 0.607B active for Table 5 (d 2048, 24 stages of 1+3of15 of
// 512, GPT-2's 50,257 tokens).
struct MolPaperCount {
  int64_t total = 0;      // non-embedding
  int64_t active = 0;     // non-embedding, one token
  int64_t embedding = 0;  // vocab · d, tied
};
MolPaperCount MolPaperParams(int64_t d_model, int64_t thin_width, int64_t stages, int64_t blocks,
                             int64_t shared, int64_t top_k, int64_t vocab);

}  // namespace xmod

#endif  // XMOD_COMMON_MOL_ACCOUNTING_H_
