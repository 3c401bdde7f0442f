// The dashboard's JSON endpoints (docs/dashboard.md), as functions of the store's
// named reads (store_reader.h) so that the HTTP server, `xmod dashboard` and the
// tests share them. Names and units are those of `xmod status` and
// `xmod results --format json`.
#ifndef XMOD_ORCHESTRATOR_DASHBOARD_API_H_
#define XMOD_ORCHESTRATOR_DASHBOARD_API_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/scheduler/scheduler.h"
#include "orchestrator/store/store_reader.h"

namespace xmod {

// /api/sweeps: `xmod status --format json` (every sweep), with `now` the clock
// the elapsed time and ETA are measured to. Each sweep also carries `failures`
// (its failed jobs, newest first: job_id, family, scale, attempts, updated_at,
// reason) and `in_flight` (job_id, family, scale, status, attempt, step, steps,
// steps_per_s and tokens_per_s over the attempt's reported training steps; null
// before two are reported).
absl::StatusOr<nlohmann::json> SweepsJson(StoreReader* store, Scheduler* scheduler, double now);

// /api/jobs?sweep=: `xmod results --sweep S --format json`, each row with the
// job's live `step` (the newest reported) added. NOT_FOUND for an unknown sweep.
absl::StatusOr<nlohmann::json> JobsJson(StoreReader* store, Scheduler* scheduler,
                                        const std::string& sweep);

// /api/curves?job=&max_points=: the job's curve (the job_curves view: step,
// tokens, flops, train_loss, val_loss, val_loss_causal, lr, grad_norm) as one
// array per column, thinned to at most `max_points` rows (0: all) by
// ThinCurveRows. NOT_FOUND for an unknown job.
absl::StatusOr<nlohmann::json> CurvesJson(StoreReader* store, const std::string& job,
                                          int64_t max_points);

// /api/curves?sweep=&max_points=: the curves of the sweep's succeeded and
// in-flight jobs, {sweep, jobs: [{job_id, rows, returned, thinned, columns}]},
// columns step, tokens, flops, train_loss, val_loss, val_loss_causal, each curve
// thinned as CurvesJson does. NOT_FOUND for an unknown sweep.
absl::StatusOr<nlohmann::json> SweepCurvesJson(StoreReader* store, const std::string& sweep,
                                               int64_t max_points);

// /api/compare?sweep=: the comparison views (orchestrator/report/views.h) over the
// sweep's succeeded runs: relative_to_dense (each sparse run against its
// FLOP-matched dense run), and from the newest stored dense fit (`law`: fit_id,
// params) the law's loss against training FLOPs at each dense N (law_lines) and
// its isoFLOP profiles (isoflop); `law_missing` says why there is no law; and
// `pairs`, the compute-matched paired differences of `xmod results --pairs` (one
// object per routed configuration, seeds together, with its 95% interval).
// NOT_FOUND for an unknown sweep.
absl::StatusOr<nlohmann::json> CompareJson(StoreReader* store, const std::string& sweep);

// /api/advise?sweep=&compute=&context=&bootstrap=&calibrate=: `xmod advise --format
// json` on the sweep's finished runs (report.h AdviseSweep): compute defaults to the
// largest every configuration ran, context to the largest, bootstrap to 100 refits
// (at most 1000); `extrapolate` (1) as --extrapolate; `calibrate` (2-200 simulated
// sweeps) adds `calibration` as --calibrate does (or {"error"} when it cannot
// run, e.g. without replicates). INVALID_ARGUMENT (400) for a malformed number or
// a request outside the sweep's support, NOT_FOUND for an unknown sweep.
absl::StatusOr<nlohmann::json> AdviseJson(StoreReader* store, const std::string& sweep,
                                          double compute, double context, int bootstrap,
                                          bool extrapolate, int calibrate = 0);

// /api/job?id=: the job's results row, its attempts, its checkpoints and its
// resolved config (the job file). NOT_FOUND for an unknown job.
absl::StatusOr<nlohmann::json> JobJson(StoreReader* store, const std::string& job);

// /api/fits?sweep=: every stored fit of the sweep, newest first: law, method,
// points, parameters, objective, rmse, intervals and bound flags (the stored
// report). NOT_FOUND for an unknown sweep.
absl::StatusOr<nlohmann::json> FitsJson(StoreReader* store, const std::string& sweep);

// The rows of a curve to keep so that at most `max_points` remain: every row with
// a validation loss (an evaluation; few), the first and the last row, and among
// the rest the ones largest-triangle-three-buckets picks on (step, train_loss),
// which keeps the curve's shape (spikes included) where a stride would alias.
// `steps` and `train_loss` are parallel (NaN: no train loss at that row). Returns
// ascending row indices; all rows when there are no more than max_points or
// max_points is 0.
std::vector<size_t> ThinCurveRows(const std::vector<double>& steps,
                                  const std::vector<double>& train_loss,
                                  const std::vector<bool>& keep, size_t max_points);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_DASHBOARD_API_H_
