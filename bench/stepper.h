// One model with its optimizer and a fixed batch on one device, stepped the way
// the trainer steps (forward in the chosen precision and attention path, fp32
// cross-entropy, backward, clip, AdamW), for benchmarks that time training
// steps side by side (worker_bench, gpu_bench).
#ifndef XMOD_BENCH_STEPPER_H_
#define XMOD_BENCH_STEPPER_H_

#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "common/accounting.h"
#include "worker/model/model.h"
#include "worker/model/precision.h"
#include "worker/train/adamw.h"

namespace xmod::bench {

inline double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Stepper {
  Stepper(const ModelShape& s, int64_t batch, const torch::Device& device = torch::kCPU)
      : device(device),
        vocab(s.vocab_size),
        model(DecoderOptions(s.vocab_size, s.d_model, s.n_heads, s.n_layers, s.d_ff, s.context)
                  .family(s.family)
                  .stride(s.stride)
                  .routed_tokens(RoutedTokens(s.capacity, s.context))
                  .balance_coef(s.family == Family::kXmod || s.family == Family::kMoe ? 0.01
                                : s.family == Family::kMol                            ? 0.05
                                                                                      : 0.0)
                  .router_coef(s.family == Family::kXmod || s.family == Family::kMod ? 0.01 : 0.0)
                  .experts(s.experts)
                  .mol(s.mol)
                  .z_coef(s.family == Family::kMoe ? 1e-3 : 0.0)
                  .entropy_init(s.family == Family::kDeco ? 1e-8 : 0.0)
                  .entropy_multiplier(1.002)),
        tokens(torch::randint(0, s.vocab_size, {batch, s.context}).to(device)),
        targets(torch::randint(0, s.vocab_size, {batch, s.context}).to(device)),
        flops_per_step(TrainFlopsPerToken(s) * static_cast<double>(batch * s.context)) {
    model->to(device);
    optimizer = std::make_unique<torch::optim::AdamW>(
        model->parameters(), torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}));
  }

  // One training step; seconds, with the device synchronised at both ends.
  double Step() {
    SetAttentionPath(path);
    Synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    DecoderOutput out;
    {
      Autocast amp(device, bf16);
      out = model->forward(tokens);
    }
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(out.logits.to(torch::kFloat32).reshape({-1, vocab}),
                                             targets.reshape({-1})) +
        out.aux_loss;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    AdamWStep(*optimizer);
    Synchronize();
    return Seconds(start);
  }

  void Synchronize() const {
    if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
  }

  torch::Device device;
  int64_t vocab;
  Decoder model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::Tensor tokens, targets;
  double flops_per_step;
  AttentionPath path = CurrentAttentionPath();  // set before each step
  bool bf16 = false;                            // the step's forward under bf16 autocast
};

// Interleaves the steppers (one step of each per round) so that every one sees
// the same machine conditions; returns each stepper's time in every round.
inline std::vector<std::vector<double>> StepTimes(const std::vector<Stepper*>& steppers,
                                                  int repeats) {
  for (Stepper* s : steppers) s->Step(), s->Step();  // warm-up
  std::vector<std::vector<double>> times(steppers.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < steppers.size(); ++i) times[i].push_back(steppers[i]->Step());
  }
  return times;
}

}  // namespace xmod::bench

#endif  // XMOD_BENCH_STEPPER_H_
