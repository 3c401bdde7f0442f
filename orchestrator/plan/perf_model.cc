#include "orchestrator/plan/perf_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mol_accounting.h"

namespace xmod {

namespace {

// The work of one layer (or head) for one micro-batch on one rank, forward pass.
struct Work {
  double gemm_s = 0;       // matrix multiplications
  double attention_s = 0;  // attention products (and the delta rule's chunks)
  double memory_s = 0;     // memory-bound kernels
  double kernels = 0;      // launches
  double gemm_flops = 0;   // model FLOPs of the above (forward)
  double attn_flops = 0;
  // Tensor-parallel collectives (all-reduce, or reduce-scatter and all-gather
  // under sequence parallelism), forward and backward: their count and summed bytes.
  double tp_collectives = 0;
  double tp_bytes = 0;
  // Expert all-to-alls (dispatch and combine), forward and backward.
  double a2a_collectives = 0;
  double a2a_bytes = 0;
  // The width of K and V together over the layer's softmax attention (per token):
  // what context parallelism passes around its ring.
  double kv_width = 0;

  Work& operator+=(const Work& o) {
    gemm_s += o.gemm_s;
    attention_s += o.attention_s;
    memory_s += o.memory_s;
    kernels += o.kernels;
    gemm_flops += o.gemm_flops;
    attn_flops += o.attn_flops;
    tp_collectives += o.tp_collectives;
    tp_bytes += o.tp_bytes;
    a2a_collectives += o.a2a_collectives;
    a2a_bytes += o.a2a_bytes;
    kv_width += o.kv_width;
    return *this;
  }
};

// What the op builders need to know of the rank.
struct Context {
  double peak = 0;       // FLOP/s of the matmuls at the precision
  double attn_peak = 0;  // FLOP/s of attention (bf16 under fp8)
  double hbm = 0;        // bytes/s
  double t = 1;          // tensor ranks
  double ep = 1;         // expert ranks
  bool sp = false;
  double act_bytes = 2;  // bytes per activation element
  bool fused_attention = true;
  bool causal_skip = true;
  Efficiency eff;
};

double GemmSeconds(double flops, const Context& c) {
  if (flops <= 0) return 0;
  const double e = c.eff.gemm_max * flops / (flops + c.eff.gemm_half);
  return flops / (c.peak * e);
}

// One matrix multiplication of `count` calls, each `rows` × `in` by `in` × `out`.
void Gemm(Work& w, const Context& c, double rows, double in, double out, double count = 1) {
  const double f = 2.0 * rows * in * out;
  w.gemm_s += count * GemmSeconds(f, c);
  w.gemm_flops += count * f;
  w.kernels += count;
}

void Bytes(Work& w, const Context& c, double bytes, double kernels) {
  w.memory_s += bytes / (c.hbm * c.eff.memory);
  w.kernels += kernels;
}

// The collective that ends a tensor-parallel half: one of `bytes` in the forward
// pass and one in the backward (Megatron's f and g).
void TensorCollective(Work& w, double bytes) {
  w.tp_collectives += 2;
  w.tp_bytes += 2.0 * bytes;
}

// Softmax attention of `heads` heads of width hd over n tokens, `rows`
// sequences, on one tensor rank (heads / t of them): the products QKᵀ and AV.
void AttentionCore(Work& w, const Context& c, double rows, double n, double heads, double hd) {
  const double local_heads = heads / c.t;
  const double flops = 4.0 * rows * n * n * hd * local_heads;
  w.attn_flops += flops;
  if (c.fused_attention) {
    w.attention_s += (c.causal_skip ? 0.5 : 1.0) * flops / (c.attn_peak * c.eff.attention);
    w.kernels += 1;
  } else {
    // Two batched matmuls, QKᵀ and AV, each one call over every head and sequence
    // and each at the larger of its compute and its traffic: QKᵀ writes the
    // scores and AV reads them, hd FLOPs per score against one score's bytes, so
    // on a GPU (hundreds of FLOPs per byte) the products are bound by memory, on a
    // CPU by arithmetic. Then the scores' softmax, mask and dropout, written and
    // read (four passes over the scores: 8 bytes per score in 16-bit, 16 in fp32).
    const double product_s =
        std::max(GemmSeconds(flops / 2.0, c),
                 c.act_bytes * rows * local_heads * n * n / (c.hbm * c.eff.memory));
    w.attention_s += 2.0 * product_s;
    Bytes(w, c, 4.0 * c.act_bytes * rows * local_heads * n * n, 3);
    w.kernels += 2;
  }
}

// The attention half of a softmax block of width h on `tokens` = rows · n tokens.
void AttentionHalf(Work& w, const Context& c, double rows, double n, double h, double heads,
                   double kv_heads) {
  const double tokens = rows * n, hd = h / heads;
  w.kv_width += 2.0 * kv_heads * hd;
  Gemm(w, c, tokens, h, (h + 2.0 * kv_heads * hd) / c.t);  // q, k, v
  AttentionCore(w, c, rows, n, heads, hd);
  Gemm(w, c, tokens, h / c.t, h);  // output projection
  // Norm, rotary or bias, residual: about 8 activation tensors of width h read or
  // written, split over tensor ranks under sequence parallelism.
  Bytes(w, c, 8.0 * tokens * h * c.act_bytes / (c.sp ? c.t : 1.0), 5);
  TensorCollective(w, tokens * h * c.act_bytes);
}

// An MLP of hidden width f (GELU: 2 matrices; SwiGLU: 3) on `tokens` tokens.
void MlpHalf(Work& w, const Context& c, double tokens, double h, double f, MlpKind kind,
             bool tensor_parallel = true) {
  const double t = tensor_parallel ? c.t : 1.0;
  Gemm(w, c, tokens, h, (kind == MlpKind::kGelu ? 1.0 : 2.0) * f / t);
  Gemm(w, c, tokens, f / t, h);
  Bytes(w, c, (4.0 * h / (c.sp ? c.t : 1.0) + 3.0 * f / t) * tokens * c.act_bytes, 4);
  if (tensor_parallel) TensorCollective(w, tokens * h * c.act_bytes);
}

// A Gated DeltaNet mixer of width h over `tokens` tokens: five projections, the
// small decay and write-strength projections, and the chunked delta rule with its
// convolutions at attention efficiency (many small products per chunk).
void DeltaNetHalf(Work& w, const Context& c, double tokens, double h, double heads) {
  const double hd = h / heads;
  Gemm(w, c, tokens, h, 4.0 * h / c.t);  // q, k, v, gate
  Gemm(w, c, tokens, h, 2.0 * heads / c.t);
  const double core = DeltaNetMixerFlops(static_cast<int64_t>(h), static_cast<int64_t>(hd)) -
                      2.0 * (5.0 * h * h + 2.0 * h * heads);
  w.attn_flops += core * tokens / c.t;
  w.attention_s += core * tokens / c.t / (c.attn_peak * c.eff.attention);
  Gemm(w, c, tokens, h / c.t, h);  // output
  Bytes(w, c, 16.0 * tokens * h * c.act_bytes / c.t, 10);
  TensorCollective(w, tokens * h * c.act_bytes);
}

// A layer of xmod's block for one micro-batch of `rows` sequences.
Work XmodLayer(const ModelShape& s, int64_t l, double rows, const Context& c) {
  Work w;
  const double h = static_cast<double>(s.d_model), heads = static_cast<double>(s.n_heads);
  const double T = static_cast<double>(s.context), full = rows * T;
  const FamilyTraits& tr = Traits(s.family);
  if (tr.routing == RoutingKind::kLayers) {
    // A Mixture-of-Layers stage: each of S shared blocks on every token, each of
    // N − S routed blocks on its k/(N − S) share, all behind their own down and
    // up projections; the router over the routed blocks.
    const double dt = static_cast<double>(s.mol.thin_width), hd = h / heads;
    const double thin_heads = std::max(1.0, dt / hd);
    const double ff = static_cast<double>(DefaultDff(s.mol.thin_width));
    const double routed = static_cast<double>(s.mol.blocks - s.mol.shared);
    const double share = routed > 0 ? static_cast<double>(s.mol.top_k) / routed : 0.0;
    Gemm(w, c, full, h, routed);
    for (int64_t b = 0; b < s.mol.blocks; ++b) {
      const bool shared = b < s.mol.shared;
      const double n = shared ? T : share * T;
      const double tokens = rows * n;
      Gemm(w, c, tokens, h, dt);
      if (!shared && s.mol.routed_deltanet) {
        DeltaNetHalf(w, c, tokens, dt, thin_heads);
      } else {
        AttentionHalf(w, c, rows, n, dt, thin_heads, thin_heads);
      }
      MlpHalf(w, c, tokens, dt, ff, MlpKind::kSwiglu);
      Gemm(w, c, tokens, dt, h);
      if (!shared) Bytes(w, c, 4.0 * tokens * h * c.act_bytes, 2);  // gather and scatter
    }
    return w;
  }
  if (!IsSoftmaxLayer(s, l)) {  // a gdn model's Gated DeltaNet layer
    DeltaNetHalf(w, c, full, h, heads);
    MlpHalf(w, c, full, h, static_cast<double>(s.d_ff), MlpKind::kSwiglu);
    return w;
  }
  const bool routed =
      tr.routing == RoutingKind::kDepth && s.stride > 1 && !IsAnchorLayer(l, s.stride);
  const double n = routed ? static_cast<double>(RoutedTokens(s.capacity, s.context)) : T;
  if (routed) {
    Gemm(w, c, full, h, 1.0);                                     // the router's scores
    Bytes(w, c, 4.0 * rows * n * h * c.act_bytes + 8 * full, 4);  // top-k, gather, scatter
  }
  AttentionHalf(w, c, rows, n, h, heads, heads);
  const double tokens = rows * n;
  if (!IsExpertLayer(s, l)) {
    MlpHalf(w, c, tokens, h, static_cast<double>(s.d_ff), MlpKind::kSwiglu);
    return w;
  }
  const ExpertShape& e = s.experts;
  const double experts = static_cast<double>(e.experts), width = static_cast<double>(e.width);
  Gemm(w, c, tokens, h, experts);  // router
  if (e.top_k > 0) {
    // Top-k MoE: the rank's E/ep experts each see k·tokens·ep/E rows (balanced
    // load); dispatch and combine are all-to-alls of k·tokens·h activations.
    const double k = static_cast<double>(e.top_k);
    // Dispatch and combine, forward and backward.
    w.a2a_collectives += 4;
    w.a2a_bytes += 4.0 * k * tokens * h * c.act_bytes;
    const double rows_per_expert = k * tokens * c.ep / experts, local = experts / c.ep;
    Gemm(w, c, rows_per_expert, h, 2.0 * width, local);
    Gemm(w, c, rows_per_expert, width, h, local);
    Bytes(w, c, (4.0 * k * h + 3.0 * k * width) * tokens * c.act_bytes, 6);
    if (e.shared > 0) {
      MlpHalf(w, c, tokens, h, static_cast<double>(e.shared) * width, MlpKind::kSwiglu, false);
    }
  } else {
    // DECO: every expert computed densely as one wide up and down projection.
    Gemm(w, c, tokens, h, experts * width);
    Gemm(w, c, tokens, experts * width, h);
    Bytes(w, c, 6.0 * tokens * experts * width * c.act_bytes, 6);
    if (e.shared_width > 0) {
      MlpHalf(w, c, tokens, h, static_cast<double>(e.shared_width), MlpKind::kSwiglu, false);
    }
  }
  return w;
}

// A GPT-style layer (LayerNorm, GELU or SwiGLU, GQA).
Work GptLayer(const PlanModel& m, double rows, const Context& c) {
  Work w;
  const ModelShape& s = m.shape;
  const double h = static_cast<double>(s.d_model), heads = static_cast<double>(s.n_heads);
  const double kv = static_cast<double>(m.kv_heads > 0 ? m.kv_heads : s.n_heads);
  AttentionHalf(w, c, rows, static_cast<double>(s.context), h, heads, kv);
  MlpHalf(w, c, rows * static_cast<double>(s.context), h, static_cast<double>(s.d_ff), m.mlp);
  return w;
}

// The head: the final norm, the logits' matmul and the loss over V / t classes.
Work Head(const ModelShape& s, double rows, const Context& c) {
  Work w;
  const double tokens = rows * static_cast<double>(s.context);
  const double h = static_cast<double>(s.d_model), v = static_cast<double>(s.vocab_size);
  Gemm(w, c, tokens, h, v / c.t);
  Bytes(w, c, 3.0 * 4.0 * tokens * v / c.t, 3);  // fp32 logits, softmax, gradient
  return w;
}

// A layer's forward time (its kernels and launches; not its collectives).
double ForwardSeconds(const Work& w, const Efficiency& e) {
  return w.gemm_s + w.attention_s + w.memory_s + w.kernels * e.kernel_s;
}
// Its backward: twice the matmuls (input and weight gradients), 2.5 times the
// attention (fused attention's backward recomputes the scores), twice the
// memory-bound kernels, about twice the launches.
double BackwardSeconds(const Work& w, const Efficiency& e) {
  return 2.0 * w.gemm_s + 2.5 * w.attention_s + 2.0 * w.memory_s + 2.0 * w.kernels * e.kernel_s;
}

// The bandwidth of a collective over a group whose ranks sit `per_node` to a
// node: within a node, NVLink; across nodes, each of the group's ranks on a node
// drives its own network port, and NCCL's rings run one channel per port, so the
// group moves per_node ports' worth of traffic across the boundary at once
// (capped by NVLink, which every hop inside the node still takes).
double LinkBandwidth(bool intra, const ClusterProfile& c, const Efficiency& e,
                     int64_t per_node = 1) {
  const double nvlink = c.intra_bandwidth * e.intra;
  if (intra) return nvlink;
  return std::min(
      nvlink, static_cast<double>(std::max<int64_t>(1, per_node)) * c.inter_bandwidth * e.inter);
}
double LinkLatency(bool intra, const ClusterProfile& c) {
  return intra ? c.intra_latency : c.inter_latency;
}

// Communication that can hide behind `window` seconds of compute: what sticks
// out, plus the drag of what hides (shared memory bandwidth and SMs).
double Exposed(double comm, double window, double drag) {
  return std::max(0.0, comm - window) + drag * std::min(comm, window);
}

}  // namespace

double AllReduceSeconds(double bytes, int64_t p, double bw, double lat) {
  if (p <= 1) return 0;
  const double pp = static_cast<double>(p);
  return 2.0 * (pp - 1.0) / pp * bytes / bw + 2.0 * std::ceil(std::log2(pp)) * lat;
}
double ReduceScatterSeconds(double bytes, int64_t p, double bw, double lat) {
  if (p <= 1) return 0;
  const double pp = static_cast<double>(p);
  return (pp - 1.0) / pp * bytes / bw + std::ceil(std::log2(pp)) * lat;
}
double AllToAllSeconds(double bytes, int64_t p, double bw, double lat) {
  if (p <= 1) return 0;
  const double pp = static_cast<double>(p);
  return (pp - 1.0) / pp * bytes / bw + lat;
}
double SendSeconds(double bytes, double bw, double lat) { return bytes / bw + lat; }
double BubbleFraction(int64_t p, int64_t m, int64_t v) {
  return static_cast<double>(p - 1) / static_cast<double>(std::max<int64_t>(1, v) * m);
}

const char* RecomputeName(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kNone:
      return "none";
    case RecomputeMode::kSelective:
      return "selective";
    case RecomputeMode::kFull:
      return "full";
  }
  return "none";
}
const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kFp32:
      return "fp32";
  }
  return "bf16";
}

std::string LayoutText(const Layout& l) {
  std::string s = absl::StrCat("tp ", l.tp, " pp ", l.pp);
  if (l.interleave > 1) absl::StrAppend(&s, "x", l.interleave);
  absl::StrAppend(&s, " dp ", l.dp);
  if (l.cp > 1) absl::StrAppend(&s, " cp ", l.cp);
  if (l.ep > 1) absl::StrAppend(&s, " ep ", l.ep);
  absl::StrAppend(&s, " mb ", l.micro_batch, " zero ", l.zero_stage, " recompute ",
                  RecomputeName(l.recompute));
  return s;
}

nlohmann::json LayoutJson(const Layout& l) {
  return {{"gpus", l.gpus},
          {"tp", l.tp},
          {"pp", l.pp},
          {"interleave", l.interleave},
          {"dp", l.dp},
          {"ep", l.ep},
          {"cp", l.cp},
          {"micro_batch", l.micro_batch},
          {"global_batch", l.global_batch},
          {"zero_stage", l.zero_stage},
          {"recompute", RecomputeName(l.recompute)},
          {"sequence_parallel", l.sequence_parallel && l.tp > 1},
          {"precision", PrecisionName(l.precision)}};
}

absl::Status CheckLayout(const PlanModel& m, const Layout& l) {
  const ModelShape& s = m.shape;
  const auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.ep < 1 || l.interleave < 1 || l.micro_batch < 1 ||
      l.global_batch < 1) {
    return bad("tp, pp, dp, ep, interleave, micro_batch and global_batch must be >= 1");
  }
  if (l.cp < 1) return bad("cp must be >= 1");
  if (l.tp * l.pp * l.dp * l.cp != l.gpus) {
    return bad(l.cp > 1 ? "tp × pp × dp × cp = " : "tp × pp × dp = ", l.tp * l.pp * l.dp * l.cp,
               " is not the ", l.gpus, " GPUs");
  }
  if (l.cp > 1 && s.context % (2 * l.cp) != 0) {
    return bad("cp ", l.cp, " needs the context ", s.context,
               " to split into 2 × cp equal chunks (causal load balancing)");
  }
  if (s.n_heads % l.tp != 0) return bad("tp ", l.tp, " does not divide ", s.n_heads, " heads");
  if (m.kv_heads > 0 && m.kv_heads % l.tp != 0 && l.tp % m.kv_heads != 0) {
    return bad("tp ", l.tp, " and ", m.kv_heads, " K/V heads do not divide one another");
  }
  if (s.d_ff % l.tp != 0) return bad("tp ", l.tp, " does not divide d_ff ", s.d_ff);
  if (s.n_layers < l.pp * l.interleave) {
    return bad("pp × interleave = ", l.pp * l.interleave, " exceeds ", s.n_layers, " layers");
  }
  if (l.interleave > 1 && l.pp == 1) return bad("interleave needs pp > 1");
  if (l.global_batch % (l.micro_batch * l.dp) != 0) {
    return bad("global_batch ", l.global_batch,
               " is not a multiple of micro_batch × dp = ", l.micro_batch * l.dp);
  }
  if (l.interleave > 1 && l.micro_batches() % l.pp != 0) {
    return bad("interleaving needs the ", l.micro_batches(),
               " micro-batches to be a multiple of pp ", l.pp);
  }
  if (l.zero_stage < 0 || l.zero_stage > 3) return bad("zero_stage must be 0, 1, 2 or 3");
  if (l.ep > 1) {
    if (!IsExpertFamily(s.family) || s.experts.top_k == 0) {
      return bad("ep ", l.ep, " needs a top-k expert model (family moe)");
    }
    if (l.dp % l.ep != 0) return bad("ep ", l.ep, " does not divide dp ", l.dp);
    if (s.experts.experts % l.ep != 0) {
      return bad("ep ", l.ep, " does not divide ", s.experts.experts, " experts");
    }
  }
  return absl::OkStatus();
}

double ModelFlopsPerToken(const PlanModel& m) {
  if (m.style == BlockStyle::kXmod) return TrainFlopsPerToken(m.shape);
  const ModelShape& s = m.shape;
  const double h = static_cast<double>(s.d_model), f = static_cast<double>(s.d_ff);
  const double heads = static_cast<double>(s.n_heads);
  const double kv = static_cast<double>(m.kv_heads > 0 ? m.kv_heads : s.n_heads);
  const double layer =
      2.0 * h * h + 2.0 * h * h * kv / heads + (m.mlp == MlpKind::kGelu ? 2.0 : 3.0) * h * f;
  const double n_layers = static_cast<double>(s.n_layers);
  return 6.0 * (layer * n_layers + h * static_cast<double>(s.vocab_size)) +
         12.0 * n_layers * h * static_cast<double>(s.context);
}

double OperationFlopsPerToken(const PlanModel& m) {
  Context c;
  c.peak = c.attn_peak = 1e15;
  c.hbm = 1e12;
  c.fused_attention = true;
  Work total;
  for (int64_t l = 0; l < m.shape.n_layers; ++l) {
    total += m.style == BlockStyle::kGpt ? GptLayer(m, 1.0, c) : XmodLayer(m.shape, l, 1.0, c);
  }
  total += Head(m.shape, 1.0, c);
  return (total.gemm_flops + total.attn_flops) / static_cast<double>(m.shape.context);
}

Prediction Predict(const PlanModel& m, const Layout& l, const ClusterProfile& cluster,
                   const Efficiency& eff) {
  const ModelShape& s = m.shape;
  const int64_t gpn = l.gpus_per_node > 0 ? l.gpus_per_node : cluster.gpus_per_node;
  Context c;
  c.eff = eff;
  const double bf16_peak = cluster.peak_flops;
  c.peak = l.precision == Precision::kFp32  ? cluster.peak_flops_fp32
           : l.precision == Precision::kFp8 ? 2.0 * bf16_peak
                                            : bf16_peak;
  c.attn_peak = l.precision == Precision::kFp32 ? cluster.peak_flops_fp32 : bf16_peak;
  c.hbm = cluster.hbm_bandwidth;
  c.t = static_cast<double>(l.tp);
  c.ep = static_cast<double>(l.ep);
  c.sp = l.sequence_parallel && l.tp > 1;
  c.act_bytes = l.precision == Precision::kFp32 ? 4.0 : 2.0;
  c.fused_attention = cluster.assumptions.fused_attention;
  c.causal_skip = cluster.assumptions.causal_skip;
  // Context parallelism: each rank runs 1/cp of every sequence's tokens (its
  // queries against all keys), so the per-rank work is that of micro_batch / cp
  // sequences' worth of tokens.
  const double cp = static_cast<double>(l.cp);
  const double rows = static_cast<double>(l.micro_batch) / cp;
  const int64_t micro = l.micro_batches();
  const double mb = static_cast<double>(micro);
  const double p = static_cast<double>(l.pp), v = static_cast<double>(l.interleave);

  // Links: a group whose ranks fit in one node talks over NVLink. Tensor ranks
  // are adjacent, then expert ranks (inside the DP group, stride tp), then data
  // ranks, then pipeline stages (Megatron's order: tp, dp, pp).
  const bool tp_intra = l.tp <= gpn;
  const bool ep_intra = l.tp * l.ep <= gpn;
  const bool cp_intra = l.tp * l.cp <= gpn;
  const bool dp_intra = l.tp * l.cp * l.dp <= gpn;
  const bool pp_intra = l.tp * l.cp * l.dp * l.pp <= gpn;
  // Ranks of one group on one node: tensor ranks fill a node first, then the
  // expert or data ranks take the rest of it.
  const int64_t tp_node = std::min(l.tp, gpn);
  const int64_t ep_node = std::max<int64_t>(1, std::min(l.ep, gpn / tp_node));
  const int64_t cp_node = std::max<int64_t>(1, std::min(l.cp, gpn / tp_node));
  // The gradients are reduced over the data and context ranks together.
  const int64_t dp_group = l.dp * l.cp;
  const int64_t dp_node = std::max<int64_t>(1, std::min(dp_group, gpn / tp_node));

  // Per-layer work and per micro-batch time on each stage.
  double worst_mb = 0, worst_fwd = 0, worst_bwd = 0, worst_recompute = 0, worst_tp = 0,
         worst_ep = 0, worst_cp = 0;
  double recompute_flops = 0;  // forward, whole model, one micro-batch
  for (int64_t stage = 0; stage < l.pp; ++stage) {
    double fwd = 0, bwd = 0, recompute = 0, tp = 0, a2a = 0, ring = 0;
    // Layers split as evenly as they go: stage k runs [k·L/p, (k+1)·L/p).
    for (int64_t layer = stage * s.n_layers / l.pp; layer < (stage + 1) * s.n_layers / l.pp;
         ++layer) {
      const Work w =
          m.style == BlockStyle::kGpt ? GptLayer(m, rows, c) : XmodLayer(s, layer, rows, c);
      fwd += ForwardSeconds(w, eff);
      bwd += BackwardSeconds(w, eff);
      if (l.recompute == RecomputeMode::kFull) {
        recompute += eff.recompute * ForwardSeconds(w, eff);
        recompute_flops += w.gemm_flops + w.attn_flops;
      } else if (l.recompute == RecomputeMode::kSelective) {
        recompute += eff.recompute * w.attention_s;
        recompute_flops += w.attn_flops;
      }
      // Full recomputation repeats the forward's collectives (half of them).
      const double again = l.recompute == RecomputeMode::kFull ? 1.5 : 1.0;
      if (l.tp > 1 && w.tp_collectives > 0) {
        // An all-reduce, or a reduce-scatter and an all-gather (the same volume).
        const double lat = LinkLatency(tp_intra, cluster);
        tp += again * (AllReduceSeconds(w.tp_bytes, l.tp,
                                        LinkBandwidth(tp_intra, cluster, eff, tp_node), 0.0) +
                       w.tp_collectives * AllReduceSeconds(0.0, l.tp, 1.0, lat));
      }
      if (l.cp > 1 && w.kv_width > 0) {
        // The ring of K/V chunks: each rank receives the other cp − 1 chunks of K
        // and V forward, and again with their gradients backward (three times the
        // forward's bytes), hidden behind the attention it feeds.
        const double bytes = (cp - 1.0) / cp * static_cast<double>(l.micro_batch) *
                             static_cast<double>(s.context) * w.kv_width / c.t * c.act_bytes;
        const double bw = LinkBandwidth(cp_intra, cluster, eff, cp_node);
        const double lat = (cp - 1.0) * LinkLatency(cp_intra, cluster);
        ring += Exposed(bytes / bw + lat, w.attention_s, eff.overlap_drag) +
                Exposed(2.0 * bytes / bw + 2.0 * lat, 2.5 * w.attention_s, eff.overlap_drag);
      }
      if (l.ep > 1 && w.a2a_collectives > 0) {
        const double lat = LinkLatency(ep_intra, cluster);
        a2a += again * (AllToAllSeconds(w.a2a_bytes, l.ep,
                                        LinkBandwidth(ep_intra, cluster, eff, ep_node), 0.0) +
                        w.a2a_collectives * AllToAllSeconds(0.0, l.ep, 1.0, lat));
      }
    }
    if (stage == l.pp - 1) {
      const Work head = Head(s, rows, c);
      fwd += ForwardSeconds(head, eff);
      bwd += BackwardSeconds(head, eff);
    }
    if (stage == 0) {
      fwd += 2.0 * rows * static_cast<double>(s.context) * c.act_bytes *
             static_cast<double>(s.d_model) / c.hbm / eff.memory;  // embedding
    }
    const double total = fwd + bwd + recompute + tp + a2a + ring;
    if (total > worst_mb) {
      worst_mb = total;
      worst_fwd = fwd;
      worst_bwd = bwd;
      worst_recompute = recompute;
      worst_tp = tp;
      worst_ep = a2a;
      worst_cp = ring;
    }
  }

  // Memory, and the slow-down when it runs close to the device's size.
  ParallelMemoryConfig mc;
  mc.style = m.style;
  mc.mlp = m.mlp;
  mc.kv_heads = m.kv_heads;
  mc.micro_batch_rows = l.micro_batch;
  mc.micro_batches = micro;
  mc.tensor_parallel = l.tp;
  mc.sequence_parallel = c.sp;
  mc.pipeline_parallel = l.pp;
  mc.interleave = l.interleave;
  mc.data_parallel = dp_group;
  mc.context_parallel = l.cp;
  mc.expert_parallel = l.ep;
  mc.zero_stage = l.zero_stage;
  mc.recompute = l.recompute;
  mc.bf16 = l.precision != Precision::kFp32;
  mc.fused_attention = c.fused_attention;
  mc.weight_bytes = cluster.assumptions.weight_bytes;
  mc.grad_bytes = cluster.assumptions.grad_bytes;
  mc.optimizer_bytes = cluster.assumptions.optimizer_bytes;
  Prediction out;
  out.memory = EstimateParallelMemory(s, mc);
  out.memory_gb = out.memory.total / 1e9;
  out.fits = out.memory.total <= 0.9 * cluster.hbm_bytes;
  const double use = out.memory.total / cluster.hbm_bytes;
  const double pressure = 1.0 + eff.pressure * std::max(0.0, use - 0.85) / 0.15;

  const double kernels_s = (worst_fwd + worst_bwd + worst_recompute) * pressure;
  // Pipeline stage to stage: each micro-batch's activations forward and their
  // gradients backward, once per virtual chunk, on the critical path.
  double p2p = 0;
  if (l.pp > 1) {
    const double bytes = rows * static_cast<double>(s.context) * static_cast<double>(s.d_model) *
                         c.act_bytes / (c.sp ? c.t : 1.0);
    p2p = 2.0 * v *
          SendSeconds(bytes, LinkBandwidth(pp_intra, cluster, eff), LinkLatency(pp_intra, cluster));
  }
  const double per_mb = kernels_s + worst_tp + worst_ep + worst_cp + p2p;
  out.compute_s = mb * kernels_s;
  out.tp_comm_s = mb * worst_tp;
  out.ep_comm_s = mb * worst_ep;
  out.cp_comm_s = mb * worst_cp;
  out.pp_comm_s = mb * p2p;
  out.bubble_s = (p - 1.0) / v * per_mb;

  // Data parallelism: the stage's parameters (tensor- and expert-split) are
  // reduced, and under ZeRO gathered, over the DP group.
  const double params = out.memory.parameters;
  const double dp_bw = LinkBandwidth(dp_intra, cluster, eff, dp_node);
  const double dp_lat = LinkLatency(dp_intra, cluster);
  const double grad_b = cluster.assumptions.grad_reduce_bytes;
  const double weight_b = l.precision == Precision::kFp32 ? 4.0 : 2.0;
  if (dp_group > 1) {
    if (l.zero_stage >= 3) {
      // Every micro-batch gathers the weights for its forward and again for its
      // backward and reduce-scatters the gradients, hidden behind its own compute.
      const double comm = 2.0 * ReduceScatterSeconds(params * weight_b, dp_group, dp_bw, dp_lat) +
                          ReduceScatterSeconds(params * grad_b, dp_group, dp_bw, dp_lat);
      out.dp_comm_s = mb * Exposed(comm, kernels_s, eff.overlap_drag);
    } else {
      // Once per step: the gradients (all-reduce, or reduce-scatter and the updated
      // weights' all-gather under ZeRO 1/2), behind the last micro-batch's backward.
      const double comm =
          l.zero_stage == 0 ? AllReduceSeconds(params * grad_b, dp_group, dp_bw, dp_lat)
                            : ReduceScatterSeconds(params * grad_b, dp_group, dp_bw, dp_lat) +
                                  ReduceScatterSeconds(params * weight_b, dp_group, dp_bw, dp_lat);
      out.dp_comm_s = Exposed(comm, worst_bwd * pressure, eff.overlap_drag);
    }
  }
  // The optimizer: about 30 bytes per parameter it updates (fp32 master weight,
  // two moments and the gradient read, three written, the bf16 weight written).
  const double updated = l.zero_stage >= 1 ? params / static_cast<double>(dp_group) : params;
  out.optimizer_s = 30.0 * updated / (c.hbm * eff.memory);
  out.step_s = out.compute_s + out.tp_comm_s + out.ep_comm_s + out.cp_comm_s + out.pp_comm_s +
               out.bubble_s + out.dp_comm_s + out.optimizer_s;
  const double tokens = static_cast<double>(l.global_batch) * static_cast<double>(s.context);
  out.tokens_per_s = tokens / out.step_s;
  out.model_flops_per_token = ModelFlopsPerToken(m);
  // Recomputation's FLOPs per token: the forward FLOPs recomputed on every stage,
  // summed over the stages, per token of a micro-batch.
  out.hardware_flops_per_token =
      out.model_flops_per_token + recompute_flops / (rows * static_cast<double>(s.context));
  const double peak = l.precision == Precision::kFp32 ? cluster.peak_flops_fp32 : bf16_peak;
  const double capacity = static_cast<double>(l.gpus) * peak;
  out.mfu = out.tokens_per_s * out.model_flops_per_token / capacity;
  out.hfu = out.tokens_per_s * out.hardware_flops_per_token / capacity;
  return out;
}

}  // namespace xmod
