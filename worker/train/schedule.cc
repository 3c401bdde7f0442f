#include "worker/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace xmod {

double LearningRate(const JobFile& job, int64_t step) {
  if (job.warmup_steps > 0 && step <= job.warmup_steps) {
    return job.lr * static_cast<double>(step) / static_cast<double>(job.warmup_steps);
  }
  switch (job.schedule) {
    case Schedule::kConstant:
      return job.lr;
    case Schedule::kCosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, job.steps - job.warmup_steps));
      const double progress = std::min(1.0, static_cast<double>(step - job.warmup_steps) / span);
      return job.min_lr + 0.5 * (job.lr - job.min_lr) * (1.0 + std::cos(M_PI * progress));
    }
    case Schedule::kWsd: {
      const int64_t decay_start = job.steps - job.decay_steps;
      if (step <= decay_start || job.decay_steps <= 0) return job.lr;
      const double r = std::min(
          1.0, static_cast<double>(step - decay_start) / static_cast<double>(job.decay_steps));
      switch (job.decay_shape) {
        case DecayShape::kLinear:
          // Written as before the shapes existed, so linear runs stay bit-identical.
          return job.lr + (job.min_lr - job.lr) * r;
        case DecayShape::kOneMinusSqrt:
          return job.min_lr + (job.lr - job.min_lr) * (1.0 - std::sqrt(r));
        case DecayShape::kCosine:
          return job.min_lr + (job.lr - job.min_lr) * 0.5 * (1.0 + std::cos(M_PI * r));
        case DecayShape::kExponential:
          return job.lr * std::pow(job.min_lr / job.lr, r);
      }
      return job.lr;
    }
  }
  return job.lr;
}

}  // namespace xmod
