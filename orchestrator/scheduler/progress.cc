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

QueryResult StatusTable(const std::vector<SweepSummary>& sweeps, double now) {
  QueryResult t;
  t.columns.push_back("sweep");
  for (JobState s : kAllJobStates) t.columns.emplace_back(JobStateName(s));
  for (const char* c : {"total", "progress", "elapsed_s", "eta_s", "train_flops",
                        "standalone_flops", "flops_vs_standalone"}) {
    t.columns.push_back(c);
  }
  for (const SweepSummary& p : sweeps) {
    std::vector<Value> row{p.states.sweep};
    for (JobState s : kAllJobStates) row.emplace_back(p.states.counts.at(s));
    row.emplace_back(p.states.total);
    const FlopProgress& flops = p.flops;
    row.emplace_back(flops.Fraction());
    // ETA from the FLOP rate since the sweep's first attempt.
    const double elapsed = p.started_at > 0 ? now - p.started_at : 0.0;
    row.emplace_back(elapsed);
    if (const std::optional<double> eta = EtaSeconds(flops, 0.0, elapsed)) {
      row.emplace_back(*eta);
    } else {
      row.emplace_back(std::monostate{});
    }
    // What cooldown branches save: the sweep's FLOPs against every result trained alone.
    row.emplace_back(flops.total);
    row.emplace_back(flops.standalone);
    if (flops.standalone > 0) {
      row.emplace_back(flops.total / flops.standalone);
    } else {
      row.emplace_back(std::monostate{});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

QueryResult InFlightTable(const std::vector<JobProgressRow>& jobs) {
  QueryResult running;
  running.columns = {"job_id",  "family", "scale",   "sparsity", "stride",
                     "context", "status", "attempt", "step",     "steps"};
  for (const JobProgressRow& j : jobs) {
    if (!j.in_flight()) continue;
    running.rows.push_back({j.job_id, j.family, j.scale, j.sparsity, j.stride, j.context, j.status,
                            j.attempt, j.step, j.steps});
  }
  return running;
}

}  // namespace xmod
