// A sweep's progress and ETA, computed one way for every view (`xmod status`
// with --db or --coordinator, the server's GetStatus, `xmod run`). Progress is
// counted in training FLOPs, not jobs: the scheduler runs the cheap jobs first,
// so the share of jobs done overstates the share of work done.
#ifndef XMOD_ORCHESTRATOR_SCHEDULER_PROGRESS_H_
#define XMOD_ORCHESTRATOR_SCHEDULER_PROGRESS_H_

#include <optional>
#include <vector>

#include "orchestrator/store/rows.h"

namespace xmod {

struct FlopProgress {
  double done = 0.0;   // FLOPs of succeeded jobs plus the reported share of jobs in flight
  double total = 0.0;  // FLOPs of every job of the sweep
  // FLOPs of the same results with every job trained alone (cooldown branches
  // from step 0, no trunks): total / standalone is what branches save.
  double standalone = 0.0;
  // done / total; 1 for an empty sweep.
  double Fraction() const { return total > 0 ? done / total : 1.0; }
};

// One sweep as GetStatus and `xmod status` show it (the server computes it in
// Scheduler::Status; the remote client gets it back field for field).
struct SweepSummary {
  StateCounts states;
  FlopProgress flops;
  double started_at = 0.0;  // first attempt of any of its jobs; 0 when none began
};

FlopProgress SumProgress(const std::vector<JobProgressRow>& jobs);

// Seconds left at the FLOP rate of a window: `done_at_start` FLOPs were done when
// the window began `window_seconds` ago, `now.done` are done now. Empty while no
// work has been measured or when nothing is left. `xmod status` and GetStatus
// measure from the sweep's first attempt; `xmod run` from its own start (a resumed
// sweep's idle days would otherwise count as slow work).
std::optional<double> EtaSeconds(const FlopProgress& now, double done_at_start,
                                 double window_seconds);

// The table `xmod status` prints and the dashboard's /api/sweeps serves: per
// sweep the count in each state, total, progress (FLOP fraction), elapsed_s and
// eta_s (from the sweep's first attempt to `now`), train_flops, standalone_flops
// and flops_vs_standalone.
QueryResult StatusTable(const std::vector<SweepSummary>& sweeps, double now);
// The jobs in flight among `jobs`: id, axes, status, attempt, step of steps.
QueryResult InFlightTable(const std::vector<JobProgressRow>& jobs);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SCHEDULER_PROGRESS_H_
