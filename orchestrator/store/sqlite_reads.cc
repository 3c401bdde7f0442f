// SqliteStore's named reads: one statement (or a few) per read, each row read
// into its type from rows.h here and nowhere else.
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/store/cells.h"
#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/store/statement.h"

namespace xmod {

absl::Status SqliteStore::RequireJobLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT 1 FROM jobs WHERE job_id = ?1"));
  s->Bind(1, job_id);
  ASSIGN_OR_RETURN(QueryResult found, CollectLocked(s));
  if (found.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return absl::OkStatus();
}

absl::StatusOr<QueryResult> SqliteStore::JobResults(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(SweepIdLocked(sweep).status());
  // The view's columns, then a moe job's granularity, which migration 9 extracts
  // from the config once.
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT r.*, f.granularity FROM job_results r "
                                 "LEFT JOIN job_config_fields f ON f.job_id = r.job_id "
                                 "WHERE r.sweep = ?1 ORDER BY r.train_flops, r.job_id"));
  s->Bind(1, sweep);
  return CollectLocked(s);
}

absl::StatusOr<std::vector<JobResultRow>> SqliteStore::JobResultRows(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(SweepIdLocked(sweep).status());
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked(
          "SELECT r.job_id, r.family, r.scale, r.status, r.role, r.budget_kind, r.config_key, "
          "r.cluster_key, r.matched_to, r.experts, r.top_k, f.granularity, r.sparsity, "
          "r.capacity, r.budget_value, r.stride, r.context, r.tokens, r.tokens_trained, "
          "r.n_layers, r.seed, r.n_params_total, r.n_params_active, r.n_params_embedding, "
          "r.flops_per_token, r.train_flops, r.final_val_loss, r.final_val_loss_causal, "
          "r.final_val_loss_se, r.final_val_loss_causal_se, r.final_capacity, "
          "r.final_capacity_causal, r.final_flops_ratio_causal "
          "FROM job_results r LEFT JOIN job_config_fields f ON f.job_id = r.job_id "
          "WHERE r.sweep = ?1 ORDER BY r.train_flops, r.job_id"));
  s->Bind(1, sweep);
  std::vector<JobResultRow> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) -> absl::Status {
    JobResultRow j;
    j.id = r.Text(0);
    // The table's checks admit only names these parse; anything else was written
    // by something other than xmod.
    const auto damaged = [&](const absl::Status& status) {
      return absl::DataLossError(
          absl::StrCat(options_.path, ": job ", j.id, ": ", status.message()));
    };
    absl::StatusOr<Family> family = ParseFamily(r.Text(1));
    if (!family.ok()) return damaged(family.status());
    j.family = *family;
    j.scale = r.Text(2);
    absl::StatusOr<JobState> state = ParseJobState(r.Text(3));
    if (!state.ok()) return damaged(state.status());
    j.state = *state;
    absl::StatusOr<JobRole> role = ParseJobRole(r.Text(4));
    if (!role.ok()) return damaged(role.status());
    j.role = *role;
    j.budget_kind = r.Text(5);
    j.config_key = r.Text(6);
    j.cluster_key = r.Text(7);
    j.matched_to = r.Text(8);
    j.experts = r.Int(9);
    j.top_k = r.Int(10);
    j.granularity = r.Int(11);
    j.sparsity = r.Real(12);
    j.capacity = r.Real(13);
    j.budget_value = r.Real(14);
    j.stride = r.Int(15);
    j.context = r.Int(16);
    j.tokens = r.Int(17);
    j.tokens_trained = r.Int(18);
    j.n_layers = r.Int(19);
    j.seed = r.Int(20);
    j.n_total = r.Real(21);
    j.n_active = r.Real(22);
    j.n_embedding = r.Real(23);
    j.flops_per_token = r.Real(24);
    j.train_flops = r.Real(25);
    j.final_val_loss = r.MaybeReal(26);
    j.final_val_loss_causal = r.MaybeReal(27);
    j.final_val_loss_se = r.MaybeReal(28);
    j.final_val_loss_causal_se = r.MaybeReal(29);
    j.final_capacity = r.MaybeReal(30);
    j.final_capacity_causal = r.MaybeReal(31);
    j.final_flops_ratio_causal = r.MaybeReal(32);
    out.push_back(std::move(j));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<QueryResult> SqliteStore::JobCurve(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireJobLocked(job_id));
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT * FROM job_curves WHERE job_id = ?1 ORDER BY step"));
  s->Bind(1, job_id);
  return CollectLocked(s);
}

absl::StatusOr<std::vector<CurvePoint>> SqliteStore::CurvePoints(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireJobLocked(job_id));
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT step, tokens, flops, train_loss, val_loss, "
                                                "val_loss_causal, lr, grad_norm FROM job_curves "
                                                "WHERE job_id = ?1 ORDER BY step"));
  s->Bind(1, job_id);
  std::vector<CurvePoint> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    out.push_back({r.Int(0), r.Int(1), r.Real(2), r.MaybeReal(3), r.MaybeReal(4), r.MaybeReal(5),
                   r.MaybeReal(6), r.MaybeReal(7)});
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> SqliteStore::SweepJobIds(
    const std::string& sweep, const std::vector<JobState>& states) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked("SELECT j.job_id, j.status FROM sweep_jobs sj JOIN jobs j "
                    "ON j.job_id = sj.job_id WHERE sj.sweep_id = ?1 ORDER BY j.job_id"));
  s->Bind(1, sweep_id);
  std::vector<std::string> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) -> absl::Status {
    ASSIGN_OR_RETURN(JobState state, ParseJobState(r.Text(1)));
    if (std::find(states.begin(), states.end(), state) != states.end()) out.push_back(r.Text(0));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<FailedJobRow>> SqliteStore::FailedJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT s.name, j.job_id, j.family, j.scale, j.attempt, "
                                 "j.updated_at, j.status_reason FROM jobs j "
                                 "JOIN sweep_jobs sj ON sj.job_id = j.job_id "
                                 "JOIN sweeps s ON s.sweep_id = sj.sweep_id "
                                 "WHERE j.status = ?1 ORDER BY j.updated_at DESC, j.job_id"));
  s->Bind(1, JobStateName(JobState::kFailed));
  std::vector<FailedJobRow> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) -> absl::Status {
    FailedJobRow f;
    f.sweep = r.Text(0);
    f.job_id = r.Text(1);
    ASSIGN_OR_RETURN(f.family, ParseFamily(r.Text(2)));
    f.scale = r.Text(3);
    f.attempts = r.Int(4);
    f.updated_at = r.Real(5);
    f.reason = r.Text(6);
    out.push_back(std::move(f));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::optional<TrainSpanRow>> SqliteStore::TrainSpan(const std::string& job_id,
                                                                   int64_t attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT COUNT(*), MAX(step) - MIN(step), MAX(tokens) - "
                                 "MIN(tokens), MAX(wall_time) - MIN(wall_time) FROM metrics "
                                 "WHERE job_id = ?1 AND name = 'train_loss' AND attempt = ?2"));
  s->Bind(1, job_id).Bind(2, attempt);
  std::optional<TrainSpanRow> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    if (r.Int(0) > 0) out = TrainSpanRow{r.Int(1), r.Int(2), r.Real(3)};
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> SqliteStore::JobCommits(
    const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      Statement * s,
      PrepareLocked("SELECT a.job_id, COALESCE(json_extract(a.build, '$.commit'), '') "
                    "FROM attempts a "
                    "WHERE a.attempt = (SELECT MAX(b.attempt) FROM attempts b "
                    "                   WHERE b.job_id = a.job_id) "
                    "AND (?1 = '' OR a.job_id IN (SELECT sj.job_id FROM sweep_jobs sj "
                    "     JOIN sweeps w ON w.sweep_id = sj.sweep_id WHERE w.name = ?1))"));
  s->Bind(1, sweep);
  std::map<std::string, std::string> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    out[r.Text(0)] = r.Text(1);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<JobRecord> SqliteStore::JobDetail(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  JobRecord out;
  ASSIGN_OR_RETURN(Statement * result,
                   PrepareLocked("SELECT * FROM job_results WHERE job_id = ?1 LIMIT 1"));
  result->Bind(1, job_id);
  ASSIGN_OR_RETURN(out.result, CollectLocked(result));
  // Every job belongs to a sweep, so no results row means no such job.
  if (out.result.rows.empty()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  ASSIGN_OR_RETURN(Statement * config,
                   PrepareLocked("SELECT config_json FROM jobs WHERE job_id = ?1"));
  config->Bind(1, job_id);
  ASSIGN_OR_RETURN(QueryResult text, CollectLocked(config));
  out.config_json = AsText(Cell(text, 0, 0));
  ASSIGN_OR_RETURN(Statement * attempts,
                   PrepareLocked("SELECT attempt, worker_id, status, resumed_from_step, "
                                 "started_at, ended_at, reason FROM attempts WHERE job_id = ?1 "
                                 "ORDER BY attempt"));
  attempts->Bind(1, job_id);
  RETURN_IF_ERROR(EachRowLocked(attempts, [&](const Row& r) {
    out.attempts.push_back(
        {r.Int(0), r.MaybeText(1), r.Text(2), r.Int(3), r.Real(4), r.MaybeReal(5), r.MaybeText(6)});
    return absl::OkStatus();
  }));
  ASSIGN_OR_RETURN(Statement * checkpoints,
                   PrepareLocked("SELECT step, attempt, path, checksum, created_at "
                                 "FROM checkpoints WHERE job_id = ?1 ORDER BY step"));
  checkpoints->Bind(1, job_id);
  RETURN_IF_ERROR(EachRowLocked(checkpoints, [&](const Row& r) {
    out.checkpoints.push_back({r.Int(0), r.Int(1), r.Text(2), r.Text(3), r.Real(4)});
    return absl::OkStatus();
  }));
  return out;
}

namespace {

constexpr char kFitColumns[] =
    "SELECT fit_id, law, method, n_points, points_hash, objective, rmse, holdout_scale, "
    "created_at, params_json, result_json FROM fits ";

}  // namespace

absl::StatusOr<std::vector<FitRow>> SqliteStore::FitsLocked(const std::string& sweep,
                                                            const std::string* law) {
  ASSIGN_OR_RETURN(int64_t sweep_id, SweepIdLocked(sweep));
  static const std::string kAll =
      absl::StrCat(kFitColumns, "WHERE sweep_id = ?1 ORDER BY fit_id DESC");
  static const std::string kNewestOfLaw =
      absl::StrCat(kFitColumns, "WHERE sweep_id = ?1 AND law = ?2 ORDER BY fit_id DESC LIMIT 1");
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked(law == nullptr ? kAll : kNewestOfLaw));
  s->Bind(1, sweep_id);
  if (law != nullptr) s->Bind(2, *law);
  std::vector<FitRow> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    out.push_back({r.Int(0), r.Text(1), r.Text(2), r.Int(3), r.Text(4), r.Real(5), r.Real(6),
                   r.MaybeText(7), r.Real(8), r.Text(9), r.Text(10)});
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<FitRow>> SqliteStore::Fits(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  return FitsLocked(sweep, nullptr);
}

absl::StatusOr<std::optional<FitRow>> SqliteStore::LatestFit(const std::string& sweep,
                                                             const std::string& law) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::vector<FitRow> fits, FitsLocked(sweep, &law));
  if (fits.empty()) return std::nullopt;
  return std::move(fits.front());
}

absl::StatusOr<int64_t> SqliteStore::SweepDataVersion(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT IFNULL(v.data_version, 0) FROM sweeps s LEFT JOIN "
                                 "sweep_versions v ON v.sweep_id = s.sweep_id WHERE s.name = ?1"));
  s->Bind(1, sweep);
  std::optional<int64_t> version;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    version = r.Int(0);
    return absl::OkStatus();
  }));
  if (!version.has_value()) {
    return absl::NotFoundError(absl::StrCat("no sweep named '", sweep, "'"));
  }
  return *version;
}

absl::StatusOr<int64_t> SqliteStore::JobDataVersion(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(RequireJobLocked(job_id));
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT IFNULL(SUM(v.data_version), 0) FROM sweep_jobs sj "
                                 "JOIN sweep_versions v ON v.sweep_id = sj.sweep_id "
                                 "WHERE sj.job_id = ?1"));
  s->Bind(1, job_id);
  int64_t version = 0;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    version = r.Int(0);
    return absl::OkStatus();
  }));
  return version;
}

absl::StatusOr<SweepText> SqliteStore::SweepSpecText(const std::string& sweep) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT spec_yaml, source FROM sweeps WHERE name = ?1"));
  s->Bind(1, sweep);
  std::optional<SweepText> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    out = SweepText{r.Text(0), r.Text(1)};
    return absl::OkStatus();
  }));
  if (!out.has_value()) return absl::NotFoundError(absl::StrCat("no sweep named '", sweep, "'"));
  return *std::move(out);
}

absl::StatusOr<std::vector<std::string>> SqliteStore::SweepNames() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s, PrepareLocked("SELECT name FROM sweeps ORDER BY name"));
  std::vector<std::string> out;
  RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
    out.push_back(r.Text(0));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> SqliteStore::SweepsOf(
    const std::vector<std::string>& job_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Statement * s,
                   PrepareLocked("SELECT s.name FROM sweep_jobs sj JOIN sweeps s "
                                 "ON s.sweep_id = sj.sweep_id WHERE sj.job_id = ?1"));
  std::set<std::string> names;
  for (const std::string& id : job_ids) {
    s->Bind(1, id);
    RETURN_IF_ERROR(EachRowLocked(s, [&](const Row& r) {
      names.insert(r.Text(0));
      return absl::OkStatus();
    }));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace xmod
