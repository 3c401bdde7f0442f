#include "orchestrator/order/law_order.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/report/report.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {
namespace {

// A job whose result the dense law reads once it has run: a dense run or branch
// end (never a cooldown trunk), as FitPoints and FitNamedLaw("dense") select.
bool DenseLawReads(const JobResultRow& j) {
  static const LawSpec* const dense_law = FindLaw("dense");
  const std::vector<std::string>& families = dense_law->families;
  return j.role != JobRole::kTrunk &&
         std::count(families.begin(), families.end(), std::string(FamilyName(j.family))) > 0 &&
         ToLawPoint(j).dense();
}

}  // namespace

std::string DescribeRefit(const std::string& sweep, const OrderRefit& r) {
  if (!r.steered) {
    return absl::StrCat("adaptive order: sweep '", sweep, "': cheapest-first for now (", r.why,
                        "); ", r.candidates, " dense job(s) pending");
  }
  return absl::StrFormat(
      "adaptive order: sweep '%s': dense law refitted on %d point(s) in %.2f s; target N %.3g, D "
      "%.3g (sd of log L there %.3g sigma); %d dense job(s) pending, next %s (removes %.0f%% of "
      "the target variance)",
      sweep, r.points, r.fit_seconds, r.target.n, r.target.d, r.target_sd, r.candidates,
      r.order.empty() ? std::string("none") : r.order.front(), 100.0 * r.next_gain);
}

LawDrivenOrder::LawDrivenOrder(SqliteStore* store, Options options)
    : store_(store), options_(std::move(options)), thread_([this] { Loop(); }) {}

LawDrivenOrder::~LawDrivenOrder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LawDrivenOrder::JobCompleted(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_.push_back(job_id);
  }
  wake_.notify_all();
}

void LawDrivenOrder::RefitAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_ = true;
  }
  wake_.notify_all();
}

void LawDrivenOrder::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return stop_ || (!busy_ && completed_.empty() && !all_); });
}

void LawDrivenOrder::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !completed_.empty() || all_; });
    if (stop_) break;
    busy_ = true;
    std::deque<std::string> completed;
    completed.swap(completed_);
    const bool all = std::exchange(all_, false);
    lock.unlock();
    // Which sweeps to refit: those of the completed jobs (or every sweep). One
    // refit per sweep however many of its jobs finished meanwhile.
    absl::StatusOr<std::vector<std::string>> names =
        all ? store_->SweepNames()
            : store_->SweepsOf(std::vector<std::string>(completed.begin(), completed.end()));
    if (!names.ok()) {
      if (options_.log) {
        options_.log(absl::StrCat("adaptive order: finding the sweeps to refit: ",
                                  names.status().message()));
      }
      names = std::vector<std::string>();
    }
    for (const std::string& name : *names) {
      absl::StatusOr<OrderRefit> r = Refit(name);
      if (!options_.log) continue;
      if (!r.ok()) {
        options_.log(absl::StrCat("adaptive order: sweep '", name, "': ", r.status().message()));
      } else if (r->adaptive_sweep) {
        options_.log(DescribeRefit(name, *r));
      }
    }
    lock.lock();
    busy_ = false;
    idle_.notify_all();
  }
  busy_ = false;
  idle_.notify_all();
}

absl::StatusOr<OrderRefit> LawDrivenOrder::Refit(const std::string& sweep) {
  OrderRefit out;
  ASSIGN_OR_RETURN(SweepText text, store_->SweepSpecText(sweep));
  ASSIGN_OR_RETURN(SweepSpec spec, ParseSweepSpec(text.yaml, text.source));
  if (!spec.resources.adaptive_order) return out;
  out.adaptive_sweep = true;
  ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, store_->JobResultRows(sweep));

  std::vector<LawPoint> points;
  for (const LawPoint& x : FitPoints(jobs)) {
    if (x.dense()) points.push_back(x);
  }
  std::vector<OrderCandidate> candidates;
  double largest_n = 0.0;
  for (const JobResultRow& j : jobs) {
    if (!DenseLawReads(j)) continue;
    largest_n = std::max(largest_n, ToLawPoint(j).n);
    if (j.state != JobState::kPending || !(j.train_flops > 0)) continue;
    candidates.push_back({j.id, ToLawPoint(j), j.train_flops});
  }
  out.points = static_cast<int>(points.size());
  out.candidates = static_cast<int>(candidates.size());
  const auto [target_n, target_d] = OrderTarget(spec.resources, largest_n);
  out.target = DensePoint(target_n, target_d, 0.0);
  if (candidates.empty()) {
    out.why = "no dense job is pending";
    return out;
  }

  AdaptiveOrderOptions options;
  options.fit = options_.fit;
  if (auto it = warm_.find(sweep); it != warm_.end()) options.warm = it->second;
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(AdaptiveOrder order,
                   OrderByExpectedGain(points, candidates, out.target, options));
  out.fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.steered = order.adaptive;
  out.why = order.why;
  out.order = order.order;
  if (order.adaptive) {
    warm_[sweep] = order.fit.optima;
    out.next_gain = order.gain.empty() ? 0.0 : order.gain.front();
    out.target_sd = order.target_sd_over_sigma;
  }

  // The candidates' own FLOP figures, smallest first, handed out in the law's
  // order: the dense jobs keep cheapest-first's places among the sweep's other
  // jobs and swap among themselves. Not steered: the keys are cleared.
  std::vector<double> slots;
  for (const OrderCandidate& c : candidates) slots.push_back(c.cost);
  std::sort(slots.begin(), slots.end());
  // Equal figures (replicates) are nudged apart by one ulp so that the law's
  // order, not the job id, decides among them.
  std::vector<std::pair<std::string, std::optional<double>>> keys;
  double previous = 0.0;
  for (size_t i = 0; i < order.order.size(); ++i) {
    const double key = i == 0 ? slots[i] : std::max(slots[i], std::nextafter(previous, 1e300));
    previous = key;
    keys.emplace_back(order.order[i], order.adaptive ? std::optional<double>(key) : std::nullopt);
  }
  ASSIGN_OR_RETURN(out.keys_changed, store_->SetOrderKeys(keys));
  return out;
}

}  // namespace xmod
