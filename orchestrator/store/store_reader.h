// The store's named reads that the dashboard serves, as an interface. SqliteStore
// implements it; the dashboard takes a StoreReader so that a test can put a
// reader in front of the real store that counts or fails reads (the seam that
// worker/client/coordinator_client.h is for the worker's session).
#ifndef XMOD_ORCHESTRATOR_STORE_STORE_READER_H_
#define XMOD_ORCHESTRATOR_STORE_STORE_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_state.h"
#include "orchestrator/store/rows.h"

namespace xmod {

// Implementations are thread-safe: the dashboard calls them from its HTTP threads.
// NOT_FOUND always means an unknown sweep or job; any other error is the
// database's (SqliteStatusCode).
class StoreReader {
 public:
  virtual ~StoreReader() = default;
  // The store's clock, seconds since the Unix epoch: the one its timestamps, the
  // scheduler and the dashboard's elapsed times and ETAs use.
  virtual double Now() = 0;

  // Rows of the job_results view for one sweep, cheapest job first, with one more
  // column: `granularity` (d_ff / d_e) of a moe job, NULL for the other families.
  // A table for display (`xmod results`, /api/jobs).
  virtual absl::StatusOr<QueryResult> JobResults(const std::string& sweep) = 0;
  // The same rows, typed, in the same order.
  virtual absl::StatusOr<std::vector<JobResultRow>> JobResultRows(const std::string& sweep) = 0;

  // The job's curve (the job_curves view), by step.
  virtual absl::StatusOr<std::vector<CurvePoint>> CurvePoints(const std::string& job_id) = 0;
  // The ids of the sweep's jobs that are in one of `states`, by id.
  virtual absl::StatusOr<std::vector<std::string>> SweepJobIds(
      const std::string& sweep, const std::vector<JobState>& states) = 0;

  // Failed jobs of every sweep (a job in two sweeps once per sweep), the most
  // recently changed first.
  virtual absl::StatusOr<std::vector<FailedJobRow>> FailedJobs() = 0;
  // The span of the train-loss rows that `attempt` of the job stored; nullopt
  // when it stored none.
  virtual absl::StatusOr<std::optional<TrainSpanRow>> TrainSpan(const std::string& job_id,
                                                                int64_t attempt) = 0;
  // The job's results row (from one of its sweeps), config, attempts and
  // checkpoints.
  virtual absl::StatusOr<JobRecord> JobDetail(const std::string& job_id) = 0;

  // Every stored fit of the sweep, newest first.
  virtual absl::StatusOr<std::vector<FitRow>> Fits(const std::string& sweep) = 0;
  // The sweep's newest stored fit of `law`; nullopt when there is none.
  virtual absl::StatusOr<std::optional<FitRow>> LatestFit(const std::string& sweep,
                                                          const std::string& law) = 0;

  // The text the sweep was last submitted with. NOT_FOUND for an unknown sweep.
  virtual absl::StatusOr<SweepText> SweepSpecText(const std::string& sweep) = 0;

  // A number that grows whenever anything this reader returns about the sweep
  // changes: its text, its jobs' states, attempts, metrics and checkpoints, its
  // fits. Read before the data it stands for, an unchanged number means an
  // unchanged answer. Cheap: one lookup.
  virtual absl::StatusOr<int64_t> SweepDataVersion(const std::string& sweep) = 0;
  // The same for what this reader returns about one job: the sum of the data
  // versions of the sweeps holding it.
  virtual absl::StatusOr<int64_t> JobDataVersion(const std::string& job_id) = 0;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_STORE_READER_H_
