#include "orchestrator/dashboard/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/fit/calibrate.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/report/views.h"
#include "orchestrator/scheduler/progress.h"

namespace xmod {
namespace {

// A stored JSON text as JSON (the text itself when it does not parse).
nlohmann::json ParsedOrText(const std::string& text) {
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::json(text) : parsed;
}

template <typename T>
nlohmann::json OrNull(const std::optional<T>& v) {
  return v.has_value() ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json FailureJson(const FailedJobRow& f) {
  return {
      {"sweep", f.sweep},  {"job_id", f.job_id},     {"family", std::string(FamilyName(f.family))},
      {"scale", f.scale},  {"attempts", f.attempts}, {"updated_at", f.updated_at},
      {"reason", f.reason}};
}

}  // namespace

absl::StatusOr<nlohmann::json> SweepsJson(StoreReader* store, Scheduler* scheduler, double now) {
  ASSIGN_OR_RETURN(std::vector<SweepSummary> sweeps, scheduler->Status(""));
  nlohmann::json out = ResultJson(StatusTable(sweeps, now));
  ASSIGN_OR_RETURN(std::vector<FailedJobRow> failures, store->FailedJobs());
  for (nlohmann::json& row : out) {
    const std::string sweep = row.value("sweep", "");
    row["failures"] = nlohmann::json::array();
    for (const FailedJobRow& f : failures) {
      if (f.sweep == sweep) row["failures"].push_back(FailureJson(f));
    }
    row["in_flight"] = nlohmann::json::array();
    if (row.value("leased", 0) + row.value("running", 0) == 0) continue;
    ASSIGN_OR_RETURN(std::vector<JobProgressRow> jobs, scheduler->Jobs(sweep));
    for (const JobProgressRow& j : jobs) {
      if (!j.in_flight()) continue;
      nlohmann::json f = {{"job_id", j.job_id}, {"family", j.family},   {"scale", j.scale},
                          {"status", j.status}, {"attempt", j.attempt}, {"step", j.step},
                          {"steps", j.steps}};
      // The rate over the attempt's reported training steps: the span of its
      // train-loss rows (startup and evaluations before the first one excluded).
      ASSIGN_OR_RETURN(std::optional<TrainSpanRow> span, store->TrainSpan(j.job_id, j.attempt));
      const bool measured =
          span.has_value() && std::isfinite(span->seconds) && span->seconds > 0 && span->steps > 0;
      f["steps_per_s"] =
          measured ? nlohmann::json(static_cast<double>(span->steps) / span->seconds) : nullptr;
      f["tokens_per_s"] =
          measured ? nlohmann::json(static_cast<double>(span->tokens) / span->seconds) : nullptr;
      row["in_flight"].push_back(std::move(f));
    }
  }
  return out;
}

absl::StatusOr<nlohmann::json> JobsJson(StoreReader* store, Scheduler* scheduler,
                                        const std::string& sweep) {
  ASSIGN_OR_RETURN(QueryResult rows, ResultsTable(store, sweep));
  ASSIGN_OR_RETURN(std::vector<JobProgressRow> progress, scheduler->Jobs(sweep));
  std::map<std::string, const JobProgressRow*> by_id;
  for (const JobProgressRow& p : progress) by_id[p.job_id] = &p;
  nlohmann::json out = ResultJson(rows);
  for (nlohmann::json& row : out) {
    auto it = by_id.find(row.value("job_id", ""));
    row["step"] = it == by_id.end() ? 0 : it->second->step;
  }
  return out;
}

std::vector<size_t> ThinCurveRows(const std::vector<double>& steps,
                                  const std::vector<double>& train_loss,
                                  const std::vector<bool>& keep, size_t max_points) {
  const size_t n = steps.size();
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  if (max_points == 0 || n <= max_points) return all;
  std::vector<bool> chosen(n, false);
  size_t kept = 0;
  auto take = [&](size_t i) {
    if (!chosen[i]) {
      chosen[i] = true;
      ++kept;
    }
  };
  take(0);
  take(n - 1);
  for (size_t i = 0; i < n; ++i) {
    if (i < keep.size() && keep[i]) take(i);
  }
  // The train-loss rows not yet kept, thinned by largest-triangle-three-buckets.
  std::vector<size_t> rest;
  for (size_t i = 1; i + 1 < n; ++i) {
    if (!chosen[i] && std::isfinite(train_loss[i])) rest.push_back(i);
  }
  const size_t budget = max_points > kept ? max_points - kept : 0;
  if (budget >= rest.size()) {
    for (size_t i : rest) take(i);
  } else if (budget > 0) {
    // Buckets of equal row count between the first and last row; in each, the row
    // that makes the largest triangle with the previous pick and the next bucket's
    // mean.
    const double size = static_cast<double>(rest.size()) / static_cast<double>(budget);
    double px = steps[0], py = std::isfinite(train_loss[0]) ? train_loss[0] : 0.0;
    for (size_t b = 0; b < budget; ++b) {
      const size_t lo = static_cast<size_t>(std::floor(b * size));
      const size_t hi = std::min(rest.size(), static_cast<size_t>(std::floor((b + 1) * size)));
      const size_t nlo = hi,
                   nhi = std::min(rest.size(), static_cast<size_t>(std::floor((b + 2) * size)));
      double mx = steps[n - 1], my = std::isfinite(train_loss[n - 1]) ? train_loss[n - 1] : py;
      if (nhi > nlo) {
        mx = my = 0.0;
        for (size_t k = nlo; k < nhi; ++k) {
          mx += steps[rest[k]];
          my += train_loss[rest[k]];
        }
        mx /= static_cast<double>(nhi - nlo);
        my /= static_cast<double>(nhi - nlo);
      }
      size_t best = rest[lo];
      double best_area = -1.0;
      for (size_t k = lo; k < hi; ++k) {
        const size_t i = rest[k];
        const double area =
            std::abs((px - mx) * (train_loss[i] - py) - (px - steps[i]) * (my - py));
        if (area > best_area) {
          best_area = area;
          best = i;
        }
      }
      take(best);
      px = steps[best];
      py = train_loss[best];
    }
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i]) out.push_back(i);
  }
  return out;
}

namespace {

// The columns of the job_curves view (job_id aside), each as a number or none.
using CurveField = std::optional<double> (*)(const CurvePoint&);
const std::pair<const char*, CurveField> kCurveColumns[] = {
    {"step", [](const CurvePoint& p) { return std::optional<double>(p.step); }},
    {"tokens", [](const CurvePoint& p) { return std::optional<double>(p.tokens); }},
    {"flops", [](const CurvePoint& p) { return std::optional<double>(p.flops); }},
    {"train_loss", [](const CurvePoint& p) { return p.train_loss; }},
    {"val_loss", [](const CurvePoint& p) { return p.val_loss; }},
    {"val_loss_causal", [](const CurvePoint& p) { return p.val_loss_causal; }},
    {"lr", [](const CurvePoint& p) { return p.lr; }},
    {"grad_norm", [](const CurvePoint& p) { return p.grad_norm; }},
};

// One job's curve as {rows, returned, thinned, columns}, thinned by ThinCurveRows
// to at most `max_points` rows; `wanted` names the columns to return (empty: all).
nlohmann::json CurveColumns(const std::vector<CurvePoint>& curve, size_t max_points,
                            const std::vector<std::string>& wanted) {
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> steps, train_loss;
  std::vector<bool> keep;
  for (const CurvePoint& p : curve) {
    steps.push_back(static_cast<double>(p.step));
    train_loss.push_back(p.train_loss.value_or(kNone));
    keep.push_back(p.val_loss.has_value() || p.val_loss_causal.has_value());
  }
  const std::vector<size_t> rows = ThinCurveRows(steps, train_loss, keep, max_points);
  nlohmann::json columns = nlohmann::json::object();
  for (const auto& [name, field] : kCurveColumns) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) continue;
    nlohmann::json values = nlohmann::json::array();
    for (size_t i : rows) {
      const std::optional<double> v = field(curve[i]);
      values.push_back(v.has_value() && std::isfinite(*v) ? nlohmann::json(*v)
                                                          : nlohmann::json(nullptr));
    }
    columns[name] = std::move(values);
  }
  return nlohmann::json{{"rows", curve.size()},
                        {"returned", rows.size()},
                        {"thinned", rows.size() < curve.size()},
                        {"columns", std::move(columns)}};
}

absl::Status CheckMaxPoints(int64_t max_points) {
  if (max_points < 0) {
    return absl::InvalidArgumentError("max_points: must be 0 (every row) or positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> CurvesJson(StoreReader* store, const std::string& job,
                                          int64_t max_points) {
  RETURN_IF_ERROR(CheckMaxPoints(max_points));
  ASSIGN_OR_RETURN(std::vector<CurvePoint> curve, store->CurvePoints(job));
  nlohmann::json out = CurveColumns(curve, static_cast<size_t>(max_points), {});
  out["job_id"] = job;
  return out;
}

absl::StatusOr<nlohmann::json> SweepCurvesJson(StoreReader* store, const std::string& sweep,
                                               int64_t max_points) {
  RETURN_IF_ERROR(CheckMaxPoints(max_points));
  ASSIGN_OR_RETURN(
      std::vector<std::string> ids,
      store->SweepJobIds(sweep, {JobState::kSucceeded, JobState::kRunning, JobState::kLeased}));
  nlohmann::json curves = nlohmann::json::array();
  for (const std::string& id : ids) {
    ASSIGN_OR_RETURN(std::vector<CurvePoint> curve, store->CurvePoints(id));
    if (curve.empty()) continue;
    nlohmann::json c =
        CurveColumns(curve, static_cast<size_t>(max_points),
                     {"step", "tokens", "flops", "train_loss", "val_loss", "val_loss_causal"});
    c["job_id"] = id;
    curves.push_back(std::move(c));
  }
  return nlohmann::json{{"sweep", sweep}, {"jobs", std::move(curves)}};
}

absl::StatusOr<nlohmann::json> JobJson(StoreReader* store, const std::string& job) {
  ASSIGN_OR_RETURN(JobRecord record, store->JobDetail(job));
  nlohmann::json attempts = nlohmann::json::array();
  for (const AttemptRow& a : record.attempts) {
    attempts.push_back({{"attempt", a.attempt},
                        {"worker_id", OrNull(a.worker_id)},
                        {"status", a.status},
                        {"resumed_from_step", a.resumed_from_step},
                        {"started_at", a.started_at},
                        {"ended_at", OrNull(a.ended_at)},
                        {"reason", OrNull(a.reason)}});
  }
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const CheckpointRow& c : record.checkpoints) {
    checkpoints.push_back({{"step", c.step},
                           {"attempt", c.attempt},
                           {"path", c.path},
                           {"checksum", c.checksum},
                           {"created_at", c.created_at}});
  }
  nlohmann::json out = nlohmann::json::object();
  out["job_id"] = job;
  out["config"] = ParsedOrText(record.config_json);
  out["result"] = ResultJson(record.result)[0];
  out["attempts"] = std::move(attempts);
  out["checkpoints"] = std::move(checkpoints);
  return out;
}

absl::StatusOr<nlohmann::json> FitsJson(StoreReader* store, const std::string& sweep) {
  ASSIGN_OR_RETURN(std::vector<FitRow> fits, store->Fits(sweep));
  nlohmann::json out = nlohmann::json::array();
  for (const FitRow& f : fits) {
    nlohmann::json row = {{"fit_id", f.fit_id},
                          {"law", f.law},
                          {"method", f.method},
                          {"n_points", f.n_points},
                          {"points_hash", f.points_hash},
                          {"objective", f.objective},
                          {"rmse", f.rmse},
                          {"holdout_scale", OrNull(f.holdout_scale)},
                          {"created_at", f.created_at},
                          {"params", ParsedOrText(f.params_json)}};
    const nlohmann::json stored = ParsedOrText(f.result_json);
    // The stored report's intervals, bound flags and hold-out, where it has them.
    for (const char* key : {"intervals", "on_bound", "holdout", "bootstrap", "stages", "fitted"}) {
      if (stored.is_object() && stored.contains(key)) row[key] = stored[key];
    }
    out.push_back(std::move(row));
  }
  return out;
}

absl::StatusOr<nlohmann::json> CompareJson(StoreReader* store, const std::string& sweep) {
  ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, store->JobResultRows(sweep));
  std::vector<JobResultRow> done;
  for (const JobResultRow& j : jobs) {
    if (j.state == JobState::kSucceeded && j.final_val_loss.has_value() &&
        j.role != JobRole::kTrunk) {
      done.push_back(j);
    }
  }
  nlohmann::json out = {{"sweep", sweep}, {"law", nullptr}};
  nlohmann::json relative = nlohmann::json::array();
  for (const RelativeToDensePoint& p : RelativeToDense(done)) {
    relative.push_back({{"series", p.series},
                        {"job_id", p.job_id},
                        {"dense_job_id", p.dense_job_id},
                        {"sparsity", p.sparsity},
                        {"stride", p.stride},
                        {"relative_pct", p.relative_pct}});
  }
  out["relative_to_dense"] = std::move(relative);
  out["pairs"] = ResultJson(PairedDifferences(jobs));
  out["law_lines"] = nlohmann::json::array();
  out["isoflop"] = nlohmann::json::array();
  // The newest stored dense-law fit (xmod fit --law dense) draws the law.
  ASSIGN_OR_RETURN(std::optional<FitRow> fit, store->LatestFit(sweep, "dense"));
  if (!fit.has_value()) {
    out["law_missing"] = "no stored dense fit (run xmod fit --law dense)";
    return out;
  }
  const int64_t fit_id = fit->fit_id;
  const nlohmann::json params = ParsedOrText(fit->params_json);
  double e = 0, a = 0, b = 0, alpha = 0, beta = 0;
  for (auto [key, value] : {std::pair<const char*, double*>{"E", &e},
                            {"A", &a},
                            {"B", &b},
                            {"alpha", &alpha},
                            {"beta", &beta}}) {
    if (!params.is_object() || !params.contains(key) || !params[key].is_number()) {
      out["law_missing"] = absl::StrCat("fit ", fit_id, " has no parameter ", key);
      return out;
    }
    *value = params[key].get<double>();
  }
  const DenseLawView view = DenseLawViews(DenseLoss(e, a, b, alpha, beta), done);
  if (view.lines.empty()) {
    out["law_missing"] = "no finished dense run";
    return out;
  }
  out["law"] = {{"fit_id", fit_id}, {"params", params}};
  auto pairs = [](const std::vector<std::pair<double, double>>& points) {
    nlohmann::json xs = nlohmann::json::array(), ys = nlohmann::json::array();
    for (const auto& [x, y] : points) {
      xs.push_back(x);
      ys.push_back(std::isfinite(y) ? nlohmann::json(y) : nullptr);
    }
    return std::make_pair(xs, ys);
  };
  for (const LawLine& line : view.lines) {
    auto [flops, loss] = pairs(line.points);
    out["law_lines"].push_back({{"n", line.n}, {"flops", flops}, {"loss", loss}});
  }
  for (const IsoFlopProfile& p : view.isoflop) {
    auto [n, loss] = pairs(p.points);
    out["isoflop"].push_back({{"flops", p.flops},
                              {"n", n},
                              {"loss", loss},
                              {"lowest", {{"n", p.lowest.first}, {"loss", p.lowest.second}}}});
  }
  return out;
}

absl::StatusOr<nlohmann::json> AdviseJson(StoreReader* store, const std::string& sweep,
                                          double compute, double context, int bootstrap,
                                          bool extrapolate, int calibrate) {
  if (bootstrap < 0 || bootstrap > 1000) {
    return absl::InvalidArgumentError("bootstrap: expected 0 to 1000 refits");
  }
  if (calibrate != 0 && (calibrate < 2 || calibrate > 200)) {
    return absl::InvalidArgumentError("calibrate: expected 2 to 200 simulated sweeps");
  }
  ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, store->JobResultRows(sweep));
  AdviseOptions options;
  options.compute = compute;
  options.context = context;
  options.bootstrap = bootstrap;
  options.extrapolate = extrapolate;
  int runs = 0;
  std::vector<LawPoint> points;
  ASSIGN_OR_RETURN(Advice advice, AdviseSweep(*store, sweep, options, "auto", &runs, &points));
  nlohmann::json out = xmod::AdviceJson(advice);
  out["sweep"] = sweep;
  out["runs"] = runs;
  if (calibrate > 0) {
    const absl::StatusOr<Calibration> c = CalibrateAdvice(advice, points, calibrate, -1.0, 1);
    out["calibration"] =
        c.ok() ? CalibrationJson(*c) : nlohmann::json{{"error", std::string(c.status().message())}};
  }
  return out;
}

}  // namespace xmod
