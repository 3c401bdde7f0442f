#include "orchestrator/dashboard/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/report/views.h"
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

// NOT_FOUND unless the store has a sweep named `sweep`.
absl::Status RequireSweep(SqliteStore* store, const std::string& sweep) {
  ASSIGN_OR_RETURN(
      QueryResult found,
      store->Query(absl::StrCat("SELECT 1 FROM sweeps WHERE name = ", SqlLiteral(sweep))));
  if (found.rows.empty()) return absl::NotFoundError(absl::StrCat("no sweep '", sweep, "'"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> SweepsJson(SqliteStore* store, Scheduler* scheduler, double now) {
  ASSIGN_OR_RETURN(std::vector<SweepSummary> sweeps, scheduler->Status(""));
  nlohmann::json out = ResultJson(StatusTable(sweeps, now));
  ASSIGN_OR_RETURN(QueryResult failed,
                   store->Query("SELECT s.name AS sweep, j.job_id, j.family, j.scale, "
                                "j.attempt AS attempts, j.updated_at, j.status_reason AS reason "
                                "FROM jobs j JOIN sweep_jobs sj ON sj.job_id = j.job_id "
                                "JOIN sweeps s ON s.sweep_id = sj.sweep_id "
                                "WHERE j.status = 'failed' ORDER BY j.updated_at DESC, j.job_id"));
  const nlohmann::json failures = ResultJson(failed);
  for (nlohmann::json& row : out) {
    const std::string sweep = row.value("sweep", "");
    row["failures"] = nlohmann::json::array();
    for (const nlohmann::json& f : failures) {
      if (f.value("sweep", "") == sweep) row["failures"].push_back(f);
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
      ASSIGN_OR_RETURN(
          QueryResult span,
          store->Query(absl::StrCat("SELECT MAX(step) - MIN(step), MAX(tokens) - MIN(tokens), "
                                    "MAX(wall_time) - MIN(wall_time) FROM metrics WHERE job_id = ",
                                    SqlLiteral(j.job_id),
                                    " AND name = 'train_loss' AND attempt = ", j.attempt)));
      const double steps = AsNumber(span.rows[0][0]), tokens = AsNumber(span.rows[0][1]),
                   seconds = AsNumber(span.rows[0][2]);
      const bool measured = std::isfinite(seconds) && seconds > 0 && steps > 0;
      f["steps_per_s"] = measured ? nlohmann::json(steps / seconds) : nullptr;
      f["tokens_per_s"] = measured ? nlohmann::json(tokens / seconds) : nullptr;
      row["in_flight"].push_back(std::move(f));
    }
  }
  return out;
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

namespace {

// One job's curve (the job_curves view) as {rows, returned, thinned, columns},
// thinned by ThinCurveRows to at most `max_points` rows; `wanted` names the
// columns to return (empty: all but job_id).
nlohmann::json CurveColumns(const QueryResult& curve, size_t max_points,
                            const std::vector<std::string>& wanted) {
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
  const std::vector<size_t> rows = ThinCurveRows(steps, train_loss, keep, max_points);
  nlohmann::json columns = nlohmann::json::object();
  for (size_t c = 0; c < curve.columns.size(); ++c) {
    if (curve.columns[c] == "job_id") continue;
    if (!wanted.empty() &&
        std::find(wanted.begin(), wanted.end(), curve.columns[c]) == wanted.end()) {
      continue;
    }
    nlohmann::json values = nlohmann::json::array();
    for (size_t i : rows) {
      const double v = AsNumber(curve.rows[i][c]);
      values.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
    }
    columns[curve.columns[c]] = std::move(values);
  }
  return nlohmann::json{{"rows", curve.rows.size()},
                        {"returned", rows.size()},
                        {"thinned", rows.size() < curve.rows.size()},
                        {"columns", std::move(columns)}};
}

absl::Status CheckMaxPoints(int64_t max_points) {
  if (max_points < 0) {
    return absl::InvalidArgumentError("max_points: must be 0 (every row) or positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> CurvesJson(SqliteStore* store, const std::string& job,
                                          int64_t max_points) {
  RETURN_IF_ERROR(CheckMaxPoints(max_points));
  ASSIGN_OR_RETURN(QueryResult curve, store->JobCurve(job));
  nlohmann::json out = CurveColumns(curve, static_cast<size_t>(max_points), {});
  out["job_id"] = job;
  return out;
}

absl::StatusOr<nlohmann::json> SweepCurvesJson(SqliteStore* store, const std::string& sweep,
                                               int64_t max_points) {
  RETURN_IF_ERROR(CheckMaxPoints(max_points));
  RETURN_IF_ERROR(RequireSweep(store, sweep));
  ASSIGN_OR_RETURN(QueryResult jobs,
                   store->Query(absl::StrCat(
                       "SELECT j.job_id FROM jobs j JOIN sweep_jobs sj ON sj.job_id = j.job_id "
                       "JOIN sweeps s ON s.sweep_id = sj.sweep_id WHERE s.name = ",
                       SqlLiteral(sweep),
                       " AND j.status IN ('succeeded', 'running', 'leased') ORDER BY j.job_id")));
  nlohmann::json curves = nlohmann::json::array();
  for (const auto& row : jobs.rows) {
    const std::string id = std::get<std::string>(row[0]);
    ASSIGN_OR_RETURN(QueryResult curve, store->JobCurve(id));
    if (curve.rows.empty()) continue;
    nlohmann::json c =
        CurveColumns(curve, static_cast<size_t>(max_points),
                     {"step", "tokens", "flops", "train_loss", "val_loss", "val_loss_causal"});
    c["job_id"] = id;
    curves.push_back(std::move(c));
  }
  return nlohmann::json{{"sweep", sweep}, {"jobs", std::move(curves)}};
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
  RETURN_IF_ERROR(RequireSweep(store, sweep));
  const std::string name = SqlLiteral(sweep);
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
    for (const char* key : {"intervals", "on_bound", "holdout", "bootstrap", "stages", "fitted"}) {
      if (stored.is_object() && stored.contains(key)) row[key] = stored[key];
    }
  }
  return out;
}

absl::StatusOr<nlohmann::json> CompareJson(SqliteStore* store, const std::string& sweep) {
  ASSIGN_OR_RETURN(std::vector<SweepJob> jobs, LoadSweepJobs(store, sweep));
  std::vector<SweepJob> done;
  for (const SweepJob& j : jobs) {
    if (j.status == "succeeded" && j.final_val_loss.has_value() && j.role != "trunk") {
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
  out["law_lines"] = nlohmann::json::array();
  out["isoflop"] = nlohmann::json::array();
  // The newest stored dense-law fit (xmod fit --law dense) draws the law.
  ASSIGN_OR_RETURN(QueryResult fit,
                   store->Query(absl::StrCat(
                       "SELECT f.fit_id, f.params_json FROM fits f JOIN sweeps s ON s.sweep_id "
                       "= f.sweep_id WHERE s.name = ",
                       SqlLiteral(sweep), " AND f.law = 'dense' ORDER BY f.fit_id DESC LIMIT 1")));
  if (fit.rows.empty()) {
    out["law_missing"] = "no stored dense fit (run xmod fit --law dense)";
    return out;
  }
  const int64_t fit_id = static_cast<int64_t>(AsNumber(fit.rows[0][0]));
  const nlohmann::json params = ParsedOrText(fit.rows[0][1]);
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

}  // namespace xmod
