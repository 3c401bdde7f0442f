// The memory one rank needs to train a job: a model of what the worker's
// LibTorch decoder (worker/model) and trainer (worker/train) hold, torch-free, so
// that expansion can choose a micro-batch, recomputation and optimizer sharding
// for a declared device memory and refuse a job that cannot fit (docs/memory.md).
//
// What is counted, in bytes of tensor storage:
//   weights       4·P (fp32 master weights, P = every parameter)
//   gradients     4·P (fp32; set to none at each step's start, allocated in the
//                 backward pass layer by layer)
//   optimizer     8·P / shards (AdamW's two moments; ZeRO-1 splits them over the
//                 data-parallel ranks by whole parameters, so a rank holds at most
//                 its share plus one parameter)
//   activations   what autograd keeps for the backward pass, per layer, from the
//                 list of saved tensors of the block (docs/memory.md, "what is
//                 counted"): fp32 residual-side tensors, compute-dtype matmul
//                 outputs (bf16 under autocast), attention scores [H, n, n] per
//                 sequence on the eager path and the output plus log-sum-exp on the
//                 fused one; with recomputation only each block's inputs. An
//                 expert layer (moe, deco) counts its own MLP: the router's
//                 logits and probabilities, and for moe every assignment's
//                 gathered input, hidden state and output (top_k per token), for
//                 deco the E·d_e hidden units of every token
//   weight copies bf16 copies of the matrices under autocast, alive from a layer's
//                 forward until its backward
//   transients    the working set of the backward pass of the head (four [N, V]
//                 buffers at once) and of one layer (its gradients in flight,
//                 a moe layer's expert weight gradients before they are stacked
//                 and, with recomputation, its recomputed activations)
// The peak is the largest total over the step's phases: the forward pass, a walk
// over the backward pass (activations freed and gradients allocated layer by
// layer), the optimizer step and an evaluation forward. Not counted: the CUDA
// context, NCCL buffers, allocator fragmentation, the data loader; FitsIn leaves
// a margin for them.
#ifndef XMOD_COMMON_MEMORY_H_
#define XMOD_COMMON_MEMORY_H_

#include <cstdint>
#include <string>

#include "common/accounting.h"

namespace xmod {

struct MemoryConfig {
  int64_t micro_batch_rows = 1;  // sequences per forward on one rank
  int64_t micro_batches = 1;     // forwards per optimizer step on one rank
  int64_t eval_rows = 1;         // sequences per evaluation forward
  bool bf16 = false;             // autocast to bf16 (weights and moments stay fp32)
  bool recompute = false;        // per-layer activation recomputation
  bool fused_attention = true;   // scaled_dot_product_attention (no [n, n] scores)
  int64_t optimizer_shards = 1;  // ZeRO-1 over this many data-parallel ranks
  // CUDA's autocast runs softmax in fp32 (CPU's in bf16): the eager path's
  // probabilities then take fp32 plus a bf16 copy for the next matmul. On the
  // CPU the block's RMSNorms (always fp32 inputs), and in fp32 also its rotary
  // split and SwiGLU, run as the fused kernels of worker/model/fused_cpu.h,
  // which save fewer tensors.
  bool cuda = true;
};

struct MemoryEstimate {
  int64_t parameters = 0;  // P
  double weights = 0, gradients = 0, optimizer = 0;
  double activations = 0;    // saved for the backward pass at the end of the forward
  double weight_copies = 0;  // bf16 copies of the matrices (0 in fp32)
  double peak = 0;           // the largest total over the step (see above)
  // Which phase the peak is in: "forward", "backward", "optimizer", "evaluation".
  std::string peak_phase;
};

MemoryEstimate EstimateTrainingMemory(const ModelShape& shape, const MemoryConfig& config);

// The memory of one rank of a parallel layout, for the planner
// (orchestrator/plan, docs/planner.md "Memory"). The worker trains with tensor
// and pipeline parallelism 1, where EstimateTrainingMemory above is the measured
// model; this extends the same accounting to a layout: parameters split over
// tensor (t), pipeline (p) and expert (e) ranks, training states sharded by
// ZeRO stage over the data-parallel group, activations divided by t under
// sequence parallelism and multiplied by the micro-batches the first pipeline
// stage holds under 1F1B (min(m, p), and 1 + (p − 1)/(p·v) more with v
// interleaved chunks: Korthikanti et al. 2022). Two block styles:
//   kXmod  xmod's own block (RMSNorm, rotary, SwiGLU, no dropout; every family),
//          its saved tensors itemised as above (CUDA, the layout's precision);
//   kGpt   GPT-2/Megatron's block (LayerNorm, GELU or SwiGLU, dropout): per
//          layer 10·s·b·h bytes replicated across tensor ranks (norm inputs,
//          the two matmul inputs, dropout masks) and 24·s·b·h/t sharded, plus
//          5·a·s²·b/t for unfused attention (Korthikanti's 34 + 5as/h).
// Context parallelism (cp) divides every token-sized tensor by cp; the training
// states are sharded over the data-parallel group, which then includes the cp ranks
// (data_parallel counts them).
enum class RecomputeMode { kNone, kSelective, kFull };
enum class BlockStyle { kXmod, kGpt };
enum class MlpKind { kSwiglu, kGelu };

struct ParallelMemoryConfig {
  BlockStyle style = BlockStyle::kXmod;
  MlpKind mlp = MlpKind::kSwiglu;  // kGpt only (xmod's block is SwiGLU)
  int64_t kv_heads = 0;            // kGpt: grouped-query attention's K/V heads (0: n_heads)
  int64_t micro_batch_rows = 1;
  int64_t micro_batches = 1;  // per pipeline per optimizer step
  int64_t tensor_parallel = 1;
  bool sequence_parallel = false;
  int64_t pipeline_parallel = 1;
  int64_t interleave = 1;  // virtual pipeline chunks per rank
  int64_t data_parallel = 1;
  int64_t expert_parallel = 1;  // expert layers: experts split over this many ranks of the DP group
  int64_t context_parallel = 1;  // each rank holds 1/cp of every sequence's tokens
  int zero_stage = 0;            // 0-3: what is sharded over the data-parallel ranks
  RecomputeMode recompute = RecomputeMode::kNone;
  bool bf16 = true;
  bool fused_attention = true;
  // Bytes per parameter of the training states (Megatron mixed precision: 2, 4, 12).
  double weight_bytes = 2.0, grad_bytes = 4.0, optimizer_bytes = 12.0;
};

struct ParallelMemoryEstimate {
  double parameters = 0;            // on this rank (the fullest pipeline stage), unsharded by ZeRO
  double embedding_parameters = 0;  // of those, the token embedding's and the head's
  double weights = 0, gradients = 0, optimizer = 0;
  double activations = 0;  // the transformer layers' saved tensors, every in-flight micro-batch
  double logits = 0;       // the head's fp32 logits and their gradient (last stage)
  double buffers = 0;      // gathered parameters (ZeRO-3) and their gradients in flight
  double total = 0;
};

ParallelMemoryEstimate EstimateParallelMemory(const ModelShape& shape,
                                              const ParallelMemoryConfig& config);

// Korthikanti et al.'s activation bytes of one GPT layer for one micro-batch on
// one tensor rank (the table of docs/planner.md), for the style kGpt.
double GptLayerActivationBytes(const ModelShape& shape, const ParallelMemoryConfig& config);

// What a declared device memory leaves for the tensors this model counts:
// 92% of it, less 1.5 GiB (CUDA context, NCCL buffers, fragmentation of the
// caching allocator). A margin, not a measurement: see docs/memory.md.
double UsableDeviceBytes(double device_bytes);

// Windows per evaluation forward: the training micro-batch, raised to about
// 16,384 tokens where the logits of that many tokens stay under 256 MiB (small
// vocabularies). An evaluation forward keeps nothing for a backward, and small
// forwards are dominated by per-call overhead (the demo's final evaluation ran
// 350 forwards of 7 windows each before). The trainer uses it; the memory model
// prices it.
int64_t EvalRows(int64_t micro_rows, int64_t context, int64_t vocab_size);

// "12.3 GiB" (binary units, one decimal).
std::string FormatBytes(double bytes);

}  // namespace xmod

#endif  // XMOD_COMMON_MEMORY_H_
