// What training hands back to its caller: the metrics it reports as it goes and
// how the run ended. Torch-free, so the worker's job session (which reports them
// to the coordinator) is tested without LibTorch.
#ifndef XMOD_WORKER_TRAIN_TRAIN_RESULT_H_
#define XMOD_WORKER_TRAIN_TRAIN_RESULT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace xmod {

struct Metric {
  std::string name;
  int64_t step = 0;
  double value = 0.0;
  int64_t tokens = 0;  // tokens trained on up to this step
  double flops = 0.0;  // training FLOPs spent up to this step
};

enum class TrainOutcome { kSucceeded, kDiverged, kStopped };

struct TrainResult {
  TrainOutcome outcome = TrainOutcome::kSucceeded;
  int64_t step = 0;          // last completed step (the diverging one for kDiverged)
  int64_t resumed_from = 0;  // checkpoint step the run started from (0: fresh)
  // The final evaluation (the last step's, on final_eval_tokens), also when the run
  // resumed from the last step's checkpoint; else the latest interim one.
  double val_loss = 0.0;
  double val_loss_causal = 0.0;
  std::vector<double> train_losses;  // per completed step of this run, from resumed_from + 1
  std::string message;
};

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_TRAIN_RESULT_H_
