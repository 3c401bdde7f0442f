// The law-driven lease order of the coordinator (`resources.order: adaptive`,
// docs/order.md). After each completed job it refits, on its own thread, the dense
// law of every adaptive sweep holding the job, asks OrderByExpectedGain
// (orchestrator/fit/adaptive_order.h) which of the sweep's pending dense jobs to
// train next, and writes the answer as lease order keys (SqliteStore::SetOrderKeys).
// The lease path itself never fits anything: it reads the keys.
#ifndef XMOD_ORCHESTRATOR_ORDER_LAW_ORDER_H_
#define XMOD_ORCHESTRATOR_ORDER_LAW_ORDER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/adaptive_order.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

// What one refit of a sweep did.
struct OrderRefit {
  bool adaptive_sweep = false;     // the sweep asks for order: adaptive
  bool steered = false;            // the law was fitted and the keys follow it
  std::string why;                 // why not steered (cheapest-first meanwhile)
  int points = 0;                  // dense-law points fitted
  int candidates = 0;              // pending jobs the law will read
  LawPoint target;                 // where the prediction should be sure (n, d)
  std::vector<std::string> order;  // the candidates, first to lease first
  double next_gain = 0.0;          // fraction of the target variance the first removes
  double target_sd = 0.0;          // linearised sd of log L at the target, in σ units
  double fit_seconds = 0.0;
  int64_t keys_changed = 0;
};

// One line for the coordinator's log.
std::string DescribeRefit(const std::string& sweep, const OrderRefit& r);

class LawDrivenOrder {
 public:
  struct Options {
    FitOptions fit;                                    // default: one thread, 16 polished starts
    std::function<void(const std::string& line)> log;  // one line per refit; may be empty
    Options() {
      fit.threads = 1;
      fit.polish = 16;
    }
  };
  // `store` is not owned and must outlive this object. Starts the refit thread.
  LawDrivenOrder(SqliteStore* store, Options options);
  ~LawDrivenOrder();  // stops the thread; queued refits are dropped (keys persist)
  LawDrivenOrder(const LawDrivenOrder&) = delete;
  LawDrivenOrder& operator=(const LawDrivenOrder&) = delete;

  // Queues a refit of every adaptive sweep holding `job_id`. Returns at once (the
  // Scheduler calls it from an RPC thread: SchedulerOptions::on_complete).
  void JobCompleted(const std::string& job_id);
  // Queues a refit of every adaptive sweep (a coordinator starting on a file).
  void RefitAll();
  // Waits until nothing is queued or running.
  void Drain();

  // Refits one sweep on the caller's thread. NOT_FOUND for an unknown sweep.
  absl::StatusOr<OrderRefit> Refit(const std::string& sweep);

 private:
  void Loop();
  SqliteStore* store_;
  Options options_;
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::string> completed_;  // job ids; guarded by mu_
  bool all_ = false;                   // refit every adaptive sweep; guarded by mu_
  bool busy_ = false, stop_ = false;   // guarded by mu_
  std::map<std::string, std::vector<std::vector<double>>> warm_;  // refit thread only
  std::thread thread_;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_ORDER_LAW_ORDER_H_
