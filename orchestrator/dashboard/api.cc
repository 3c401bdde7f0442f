#include "orchestrator/dashboard/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/scheduler/progress.h"

namespace xmod {
namespace {

double AsNumber(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return std::numeric_limits<double>::quiet_NaN();
}

int Column(const QueryResult& t, const std::string& name) {
  for (size_t i = 0; i < t.columns.size(); ++i) {
    if (t.columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// A stored JSON text as JSON (the text itself when it does not parse).
nlohmann::json ParsedOrText(const Value& v) {
  const auto* s = std::get_if<std::string>(&v);
  if (s == nullptr) return nullptr;
  nlohmann::json parsed = nlohmann::json::parse(*s, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::json(*s) : parsed;
}

}  // namespace

absl::StatusOr<nlohmann::json> SweepsJson(Scheduler* scheduler, double now) {
  ASSIGN_OR_RETURN(std::vector<SweepSummary> sweeps, scheduler->Status(""));
  return ResultJson(StatusTable(sweeps, now));
}

absl::StatusOr<nlohmann::json> JobsJson(SqliteStore* store, Scheduler* scheduler,
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

absl::StatusOr<nlohmann::json> CurvesJson(SqliteStore* store, const std::string& job,
                                          int64_t max_points) {
  if (max_points < 0) {
    return absl::InvalidArgumentError("max_points: must be 0 (every row) or positive");
  }
  ASSIGN_OR_RETURN(QueryResult curve, store->JobCurve(job));
  const int step = Column(curve, "step"), train = Column(curve, "train_loss");
  const int evals[] = {Column(curve, "val_loss"), Column(curve, "val_loss_causal")};
  std::vector<double> steps, train_loss;
  std::vector<bool> keep;
  for (const auto& row : curve.rows) {
    steps.push_back(step >= 0 ? AsNumber(row[step]) : 0.0);
    train_loss.push_back(train >= 0 ? AsNumber(row[train])
                                    : std::numeric_limits<double>::quiet_NaN());
    bool eval = false;
    for (int c : evals) eval = eval || (c >= 0 && std::isfinite(AsNumber(row[c])));
    keep.push_back(eval);
  }
  const std::vector<size_t> rows =
      ThinCurveRows(steps, train_loss, keep, static_cast<size_t>(max_points));
  nlohmann::json columns = nlohmann::json::object();
  for (size_t c = 0; c < curve.columns.size(); ++c) {
    if (curve.columns[c] == "job_id") continue;
    nlohmann::json values = nlohmann::json::array();
    for (size_t i : rows) {
      const double v = AsNumber(curve.rows[i][c]);
      values.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
    }
    columns[curve.columns[c]] = std::move(values);
  }
  return nlohmann::json{{"job_id", job},
                        {"rows", curve.rows.size()},
                        {"returned", rows.size()},
                        {"thinned", rows.size() < curve.rows.size()},
                        {"columns", std::move(columns)}};
}

absl::StatusOr<nlohmann::json> JobJson(SqliteStore* store, const std::string& job) {
  const std::string id = SqlLiteral(job);
  ASSIGN_OR_RETURN(QueryResult result,
                   store->Query(absl::StrCat(
                       "SELECT r.*, j.config_json FROM job_results r JOIN jobs j ON j.job_id = "
                       "r.job_id WHERE r.job_id = ",
                       id, " LIMIT 1")));
  // Every job belongs to a sweep, so no results row means no such job.
  if (result.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", job, "'"));
  ASSIGN_OR_RETURN(QueryResult attempts,
                   store->Query(absl::StrCat("SELECT attempt, worker_id, status, "
                                             "resumed_from_step, started_at, ended_at, reason "
                                             "FROM attempts WHERE job_id = ",
                                             id, " ORDER BY attempt")));
  ASSIGN_OR_RETURN(QueryResult checkpoints,
                   store->Query(absl::StrCat("SELECT step, attempt, path, checksum, created_at "
                                             "FROM checkpoints WHERE job_id = ",
                                             id, " ORDER BY step")));
  nlohmann::json out = nlohmann::json::object();
  out["job_id"] = job;
  const int c = Column(result, "config_json");
  out["config"] = ParsedOrText(result.rows[0][c]);
  result.columns.erase(result.columns.begin() + c);
  result.rows[0].erase(result.rows[0].begin() + c);
  out["result"] = ResultJson(result)[0];
  out["attempts"] = ResultJson(attempts);
  out["checkpoints"] = ResultJson(checkpoints);
  return out;
}

absl::StatusOr<nlohmann::json> FitsJson(SqliteStore* store, const std::string& sweep) {
  const std::string name = SqlLiteral(sweep);
  ASSIGN_OR_RETURN(QueryResult found,
                   store->Query(absl::StrCat("SELECT 1 FROM sweeps WHERE name = ", name)));
  if (found.rows.empty()) return absl::NotFoundError(absl::StrCat("no sweep '", sweep, "'"));
  ASSIGN_OR_RETURN(QueryResult fits,
                   store->Query(absl::StrCat(
                       "SELECT f.fit_id, f.law, f.method, f.n_points, f.points_hash, f.objective, "
                       "f.rmse, f.holdout_scale, f.created_at, f.params_json, f.result_json "
                       "FROM fits f JOIN sweeps s ON s.sweep_id = f.sweep_id WHERE s.name = ",
                       name, " ORDER BY f.fit_id DESC")));
  const int params = Column(fits, "params_json"), report = Column(fits, "result_json");
  nlohmann::json out = ResultJson(fits);
  for (size_t i = 0; i < fits.rows.size(); ++i) {
    nlohmann::json& row = out[i];
    row.erase("params_json");
    row.erase("result_json");
    row["params"] = ParsedOrText(fits.rows[i][params]);
    const nlohmann::json stored = ParsedOrText(fits.rows[i][report]);
    // The stored report's intervals, bound flags and hold-out, where it has them.
    for (const char* key : {"intervals", "on_bound", "holdout", "bootstrap", "stages"}) {
      if (stored.is_object() && stored.contains(key)) row[key] = stored[key];
    }
  }
  return out;
}

}  // namespace xmod
