// The model and optimizer a job file describes, as the trainer builds them; also
// for tools that read a job's checkpoints without training (export.h).
#ifndef XMOD_WORKER_TRAIN_JOB_MODEL_H_
#define XMOD_WORKER_TRAIN_JOB_MODEL_H_

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/job_file.h"
#include "worker/model/model.h"

namespace xmod {

// The common fields from the job file, then the family's own
// (ModelFamily::configure).
DecoderOptions ModelOptionsFor(const JobFile& job);

// AdamW with weight decay on matrices only (embeddings, projections, head,
// routers), over `params` (the model's, or one ZeRO-1 shard of them).
std::unique_ptr<torch::optim::AdamW> MakeOptimizer(const JobFile& job,
                                                   const std::vector<torch::Tensor>& params);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_JOB_MODEL_H_
