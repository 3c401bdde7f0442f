#include "orchestrator/scheduler/progress.h"

namespace xmod {

FlopProgress SumProgress(const std::vector<JobProgressRow>& jobs) {
  FlopProgress p;
  for (const JobProgressRow& j : jobs) {
    p.total += j.train_flops;
    p.standalone += j.standalone_flops;
    p.done += j.flops_done();
  }
  return p;
}

std::optional<double> EtaSeconds(const FlopProgress& now, double done_at_start,
                                 double window_seconds) {
  const double measured = now.done - done_at_start;
  if (!(window_seconds > 0) || !(measured > 0) || !(now.total > now.done)) return std::nullopt;
  return (now.total - now.done) * window_seconds / measured;
}

}  // namespace xmod
