// The learning-rate schedule of a job file (common/job_file.h).
#ifndef XMOD_WORKER_TRAIN_SCHEDULE_H_
#define XMOD_WORKER_TRAIN_SCHEDULE_H_

#include <cstdint>

#include "common/job_file.h"

namespace xmod {

// Learning rate for optimizer update `step` (1-based): linear warm-up to lr, then
// cosine to min_lr, constant, or warmup-stable-decay (constant, then to min_lr
// over the last decay_steps in the job's decay shape: r = (step − decay start) /
// decay_steps; docs/schedules.md).
double LearningRate(const JobFile& job, int64_t step);

}  // namespace xmod

#endif  // XMOD_WORKER_TRAIN_SCHEDULE_H_
