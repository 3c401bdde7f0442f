#include "orchestrator/plan/plan_command.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_file.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law_csv.h"
#include "orchestrator/plan/calibrate.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/codesign.h"
#include "orchestrator/plan/layout_search.h"
#include "orchestrator/plan/plan_csv.h"
#include "orchestrator/report/report.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

namespace {

absl::Status CheckFormat(const std::string& format, bool csv) {
  if (format == "table" || format == "json" || (csv && format == "csv")) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--format: '", format, "' is not one of table, ", csv ? "csv, " : "", "json"));
}

// The profile and the efficiencies to use: the calibration's when given.
absl::Status LoadCluster(const PlanCommandOptions& o, ClusterProfile* cluster, Efficiency* eff) {
  if (o.cluster.empty()) return absl::InvalidArgumentError("--cluster: a profile file is required");
  ASSIGN_OR_RETURN(*cluster, LoadClusterProfile(o.cluster));
  *eff = cluster->efficiency;
  if (!o.calibration.empty()) {
    ASSIGN_OR_RETURN(*eff, LoadCalibration(o.calibration, *cluster));
  }
  return absl::OkStatus();
}

nlohmann::json PredictionJson(const Layout& l, const Prediction& p) {
  const ParallelMemoryEstimate& m = p.memory;
  return {{"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"hfu", p.hfu},
          {"step_s", p.step_s},
          {"memory_gb", p.memory_gb},
          {"fits", p.fits},
          {"step",
           {{"compute_s", p.compute_s},
            {"bubble_s", p.bubble_s},
            {"tp_comm_s", p.tp_comm_s},
            {"pp_comm_s", p.pp_comm_s},
            {"ep_comm_s", p.ep_comm_s},
            {"cp_comm_s", p.cp_comm_s},
            {"dp_comm_s", p.dp_comm_s},
            {"optimizer_s", p.optimizer_s}}},
          {"memory",
           {{"weights_gb", m.weights / 1e9},
            {"gradients_gb", m.gradients / 1e9},
            {"optimizer_gb", m.optimizer / 1e9},
            {"activations_gb", m.activations / 1e9},
            {"logits_gb", m.logits / 1e9},
            {"buffers_gb", m.buffers / 1e9}}},
          {"layout", LayoutJson(l)}};
}

}  // namespace

absl::Status RunPlanPredict(const PlanCommandOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(CheckFormat(o.format, true));
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.configs.empty()) return absl::InvalidArgumentError("--configs: a CSV file is required");
  ASSIGN_OR_RETURN(const std::vector<PlanRow> rows, ReadPlanRows(o.configs, false));
  std::vector<Prediction> predictions;
  for (const PlanRow& r : rows) predictions.push_back(Predict(r.model, r.layout, cluster, eff));
  if (o.format == "json") {
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json j = PredictionJson(rows[i].layout, predictions[i]);
      j["row"] = rows[i].where;
      if (!rows[i].name.empty()) j["name"] = rows[i].name;
      all.push_back(j);
    }
    out << all.dump(2) << "\n";
    return absl::OkStatus();
  }
  if (o.format == "csv") {
    out << "row,tokens_per_s,mfu,hfu,step_s,memory_gb,fits,compute_s,bubble_s,tp_comm_s,"
           "pp_comm_s,ep_comm_s,cp_comm_s,dp_comm_s,optimizer_s\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Prediction& p = predictions[i];
      out << absl::StrFormat(
          "%d,%.6g,%.4f,%.4f,%.6g,%.4g,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", i + 1,
          p.tokens_per_s, p.mfu, p.hfu, p.step_s, p.memory_gb, p.fits ? 1 : 0, p.compute_s,
          p.bubble_s, p.tp_comm_s, p.pp_comm_s, p.ep_comm_s, p.cp_comm_s, p.dp_comm_s,
          p.optimizer_s);
    }
    return absl::OkStatus();
  }
  out << absl::StrFormat("cluster %s (%s)%s\n", cluster.name, cluster.device,
                         o.calibration.empty() ? ", uncalibrated" : ", calibrated");
  out << absl::StrFormat("%-4s %12s %6s %9s %8s %9s %9s %9s %9s  %s\n", "row", "tokens/s", "MFU",
                         "step s", "memory", "compute", "bubble", "tp comm", "dp comm", "layout");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Prediction& p = predictions[i];
    out << absl::StrFormat("%-4d %12.0f %6.3f %9.3f %6.1fGB %9.3f %9.3f %9.3f %9.3f  %s%s\n", i + 1,
                           p.tokens_per_s, p.mfu, p.step_s, p.memory_gb, p.compute_s, p.bubble_s,
                           p.tp_comm_s, p.dp_comm_s, LayoutText(rows[i].layout),
                           p.fits ? "" : "  DOES NOT FIT (over 90% of the device)");
  }
  return absl::OkStatus();
}

namespace {

// A sweep's succeeded jobs as measured runs: each job's model and layout (xmod's
// block; its ranks data-parallel on the profile's nodes; ZeRO-1 when its
// optimizer is sharded) and the median of its reported tokens/s after the first
// report (which carries start-up).
absl::StatusOr<std::vector<PlanRow>> RowsFromSweep(SqliteStore& store, const std::string& sweep,
                                                   const ClusterProfile& cluster) {
  ASSIGN_OR_RETURN(const std::vector<std::string> ids,
                   store.SweepJobIds(sweep, {JobState::kSucceeded}));
  std::vector<PlanRow> rows;
  for (const std::string& id : ids) {
    if (!std::all_of(id.begin(), id.end(), [](char c) { return std::isxdigit(c) != 0; })) {
      return absl::InternalError(absl::StrCat("job id '", id, "' is not hexadecimal"));
    }
    ASSIGN_OR_RETURN(const JobRecord record, store.JobDetail(id));
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(record.config_json);
    } catch (const nlohmann::json::exception& e) {
      return absl::DataLossError(absl::StrCat("job ", id, ": stored job is not JSON: ", e.what()));
    }
    ASSIGN_OR_RETURN(const JobFile job, JobFileFromJson(json));
    ASSIGN_OR_RETURN(const QueryResult q,
                     store.Query(absl::StrCat("SELECT value FROM metrics WHERE job_id = '", id,
                                              "' AND name = 'tokens_per_s' ORDER BY step")));
    std::vector<double> rates;
    for (size_t i = 1; i < q.rows.size(); ++i) {
      if (const double* v = std::get_if<double>(&q.rows[i][0]); v != nullptr && *v > 0) {
        rates.push_back(*v);
      }
    }
    if (rates.empty()) continue;  // too short to measure
    std::sort(rates.begin(), rates.end());
    PlanRow row;
    row.where = absl::StrCat("job ", id);
    row.name = json.value("scale", std::string());
    row.model.shape = job.shape;
    row.model.style = BlockStyle::kXmod;
    Layout& l = row.layout;
    l.gpus = std::max<int64_t>(1, json.value("ranks", int64_t{1}));
    l.gpus_per_node = cluster.gpus_per_node;
    l.dp = l.gpus;
    l.micro_batch = job.micro_batch_size;
    l.global_batch = job.batch_size;
    l.zero_stage = job.optimizer_sharding == "zero1" ? 1 : 0;
    l.recompute = job.recompute ? RecomputeMode::kFull : RecomputeMode::kNone;
    l.precision = job.precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
    if (!CheckLayout(row.model, l).ok()) continue;  // a layout the model cannot read
    row.tokens_per_s = rates[rates.size() / 2];
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sweep '", sweep, "': no succeeded job with two or more tokens_per_s reports"));
  }
  return rows;
}

}  // namespace

absl::Status RunPlanCalibrate(const PlanCommandOptions& o, std::ostream& out) {
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.measured.empty() && o.sweep.empty()) {
    return absl::InvalidArgumentError(
        "--measured RUNS.csv or --db FILE --sweep NAME: the measured runs to calibrate on");
  }
  if (!o.sweep.empty() && o.db.empty()) {
    return absl::InvalidArgumentError("--sweep needs --db, the sweep's database");
  }
  if (o.out.empty()) return absl::InvalidArgumentError("--out: the calibration file to write");
  std::vector<PlanRow> rows;
  if (!o.measured.empty()) {
    ASSIGN_OR_RETURN(rows, ReadPlanRows(o.measured, true));
  }
  if (!o.sweep.empty()) {
    SqliteStore::Options store_options;
    store_options.path = o.db;
    store_options.read_only = true;
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(store_options));
    ASSIGN_OR_RETURN(std::vector<PlanRow> jobs, RowsFromSweep(*store, o.sweep, cluster));
    rows.insert(rows.end(), jobs.begin(), jobs.end());
  }
  ASSIGN_OR_RETURN(const CalibrationResult r, Calibrate(cluster, eff, rows));
  const nlohmann::json j = CalibrationToJson(cluster, r, rows);
  // Written whole to a temporary name, then renamed: a failed write leaves nothing.
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return absl::PermissionDeniedError(absl::StrCat(o.out, ": cannot write"));
    f << j.dump(2) << "\n";
    if (!f) return absl::DataLossError(absl::StrCat(o.out, ": write failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o.out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(o.out, ": ", ec.message()));
  out << absl::StrFormat(
      "calibrated %s on %d runs (%s): median |error| %.1f%% (%.1f%% before), 90th percentile "
      "%.1f%%, largest %.1f%%\nwrote %s\n",
      cluster.name, r.rows, r.converged ? "converged" : "NOT converged", 100 * r.median_error,
      100 * r.median_error_before, 100 * r.p90_error, 100 * r.max_error, o.out);
  return absl::OkStatus();
}

absl::Status RunPlanLayout(const PlanCommandOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(CheckFormat(o.format, false));
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.family != "dense") {
    return absl::InvalidArgumentError(
        "--family: `plan layout` takes a dense GPT-style model from flags; other families go "
        "through `plan predict --configs` rows");
  }
  if (o.mlp != "gelu" && o.mlp != "swiglu") {
    return absl::InvalidArgumentError("--mlp: gelu or swiglu");
  }
  if (o.d_model <= 0 || o.n_layers <= 0 || o.n_heads <= 0 || o.global_batch <= 0 || o.gpus <= 0) {
    return absl::InvalidArgumentError(
        "--d-model, --n-layers, --n-heads, --gpus and --global-batch must be > 0");
  }
  if (o.d_model % o.n_heads != 0) {
    return absl::InvalidArgumentError("--n-heads: must divide --d-model");
  }
  PlanModel m;
  m.style = BlockStyle::kGpt;
  m.mlp = o.mlp == "gelu" ? MlpKind::kGelu : MlpKind::kSwiglu;
  m.kv_heads = o.kv_heads;
  m.shape.family = Family::kDense;
  m.shape.d_model = o.d_model;
  m.shape.n_layers = o.n_layers;
  m.shape.n_heads = o.n_heads;
  m.shape.d_ff = o.d_ff > 0 ? o.d_ff : 4 * o.d_model;
  m.shape.vocab_size = o.vocab;
  m.shape.context = o.seq_len;
  LayoutQuery q;
  q.gpus = o.gpus;
  q.global_batch = o.global_batch;
  q.top = o.top;
  if (o.precision == "bf16") {
    q.precision = Precision::kBf16;
  } else if (o.precision == "fp16") {
    q.precision = Precision::kFp16;
  } else if (o.precision == "fp8") {
    q.precision = Precision::kFp8;
  } else if (o.precision == "fp32") {
    q.precision = Precision::kFp32;
  } else {
    return absl::InvalidArgumentError("--precision: bf16, fp16, fp8 or fp32");
  }
  const LayoutSearchResult r = SearchLayouts(m, cluster, eff, q);
  if (o.format == "json") {
    nlohmann::json j;
    j["cluster"] = cluster.name;
    j["considered"] = r.considered;
    j["fitting"] = r.fitting;
    j["layouts"] = nlohmann::json::array();
    for (const LayoutChoice& c : r.best)
      j["layouts"].push_back(PredictionJson(c.layout, c.prediction));
    out << j.dump(2) << "\n";
  } else {
    out << absl::StrFormat(
        "%d GPUs of %s, global batch %d x %d tokens: %d layouts considered, %d fit in 90%% of "
        "%.0f GB\n",
        o.gpus, cluster.name, o.global_batch, o.seq_len, r.considered, r.fitting,
        cluster.hbm_bytes / 1e9);
    for (size_t i = 0; i < r.best.size(); ++i) {
      const Prediction& p = r.best[i].prediction;
      out << absl::StrFormat(
          "%s %-52s %10.0f tokens/s  MFU %.3f  step %.2f s  %.1f GB (bubble %.2f, tp %.2f, dp "
          "%.2f s)\n",
          i == 0 ? "best" : "    ", LayoutText(r.best[i].layout), p.tokens_per_s, p.mfu, p.step_s,
          p.memory_gb, p.bubble_s, p.tp_comm_s, p.dp_comm_s);
    }
  }
  if (r.best.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "no layout fits: the smallest (%s) needs %.1f GB of %.0f GB; add GPUs or shrink the "
        "global batch",
        LayoutText(r.smallest.layout), r.smallest.prediction.memory_gb, cluster.hbm_bytes / 1e9));
  }
  return absl::OkStatus();
}

}  // namespace xmod

namespace xmod {

namespace {

// The candidate of configuration `c` at width `d` (docs/planner.md, "Co-design"):
// xmod's block, n_layers = d / aspect, heads of width 128 (at least one), the
// family's own fields from the configuration.
absl::StatusOr<CodesignCandidate> CandidateOf(const Configuration& c, int64_t d,
                                              const PlanCommandOptions& o, int64_t vocab) {
  CodesignCandidate cand;
  ModelShape& s = cand.model.shape;
  cand.model.style = BlockStyle::kXmod;
  s.d_model = d;
  s.n_layers = std::max<int64_t>(2, d / std::max<int64_t>(1, o.aspect));
  s.n_heads = std::max<int64_t>(1, d / 128);
  s.d_ff = DefaultDff(d);
  s.vocab_size = vocab;
  s.context = static_cast<int64_t>(o.context);
  if (c.family == "dense") {
    s.family = Family::kDense;
  } else if (c.family == "xmod") {
    s.family = Family::kXmod;
    s.capacity = c.capacity;
    s.stride = static_cast<int64_t>(std::llround(c.stride));
  } else if (c.family == "moe") {
    s.family = Family::kMoe;
    const int64_t k = o.top_k;
    s.experts.top_k = k;
    s.experts.experts = static_cast<int64_t>(std::llround(c.expansion * static_cast<double>(k)));
    s.experts.width = (DefaultDff(d) / k + 7) / 8 * 8;
  } else if (c.family == "mol") {
    s.family = Family::kMol;
    s.mol.thin_width = d / 4;
    s.mol.shared = 1;
    s.mol.top_k = 2;
    s.mol.blocks = 1 + static_cast<int64_t>(std::llround(2.0 * c.block_expansion));
  } else if (c.family == "gdn") {
    s.family = Family::kGdn;
    s.softmax_every =
        c.deltanet_share >= 1.0 ? 0 : std::llround(1.0 / std::max(1e-9, 1.0 - c.deltanet_share));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("configuration ", c.name, ": no planner model"));
  }
  RETURN_IF_ERROR(CheckModelSize(s));
  const double n_active = s.family == Family::kDense
                              ? static_cast<double>(CountParams(s).non_embedding)
                              : static_cast<double>(ActiveParams(s, s.n_layers));
  cand.point = c.At(n_active, 1.0, o.context);
  cand.point.n_total = static_cast<double>(CountParams(s).non_embedding);
  cand.point.layers = static_cast<double>(s.n_layers);
  cand.configuration = c.name;
  cand.name = absl::StrCat(c.name, " d=", d);
  return cand;
}

}  // namespace

absl::Status RunPlanSweep(const PlanCommandOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(CheckFormat(o.format, false));
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.db.empty() == o.csv.empty()) {
    return absl::InvalidArgumentError(
        "the runs: a sweep's database (xmod plan SWEEP --db FILE) or law points (--csv FILE "
        "--law moe), one of the two");
  }
  if (!(o.gpu_hours > 0)) return absl::InvalidArgumentError("--gpu-hours: must be > 0");
  if (!(o.context >= 1)) return absl::InvalidArgumentError("--context: a context the runs have");
  if (o.global_batch_tokens < static_cast<int64_t>(o.context)) {
    return absl::InvalidArgumentError("--global-batch-tokens: at least one sequence");
  }
  std::vector<std::string> notes;
  std::vector<LawPoint> points;
  DesignFix fixed;
  std::string source;
  if (!o.db.empty()) {
    SqliteStore::Options store_options;
    store_options.path = o.db;
    store_options.read_only = true;
    ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(store_options));
    ASSIGN_OR_RETURN(const std::vector<JobResultRow> jobs, store->JobResultRows(o.sweep));
    ASSIGN_OR_RETURN(points, AdvicePoints(jobs, PointOptions{}, &notes));
    ASSIGN_OR_RETURN(fixed, SweepDesignFix(*store, o.sweep));
    source = absl::StrCat("sweep '", o.sweep, "'");
  } else {
    // Points of a law's CSV (xmod fit --csv): its dense and its own runs.
    ASSIGN_OR_RETURN(points, ReadLawCsv(o.csv, o.law));
    source = o.csv;
  }
  if (points.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no finished run a law reads yet"));
  }
  bool context_run = false;
  double n_min = 0, n_max = 0, tpp_min = 0, tpp_max = 0;
  for (const LawPoint& x : points) {
    context_run |= x.context == o.context || (o.csv.size() > 0 && x.context == 0);
    const double tpp = x.d / x.n;
    n_min = n_min == 0 ? x.n : std::min(n_min, x.n);
    n_max = std::max(n_max, x.n);
    tpp_min = tpp_min == 0 ? tpp : std::min(tpp_min, tpp);
    tpp_max = std::max(tpp_max, tpp);
  }
  if (!context_run) {
    return absl::InvalidArgumentError(
        absl::StrCat("--context ", o.context, ": ", source,
                     " has no run at this context; its laws' dense reference is per context"));
  }
  // One law per family of configuration, fitted with bootstrap refits.
  std::map<std::string, LawReport> laws;
  // In the order of their routing: dense, then each family by its fields.
  std::vector<Configuration> configurations = SweepConfigurations(points);
  std::stable_sort(
      configurations.begin(), configurations.end(),
      [](const Configuration& a, const Configuration& b) {
        return std::make_tuple(a.family != "dense", a.family, a.expansion, a.block_expansion,
                               a.deltanet_share, -a.capacity, a.stride) <
               std::make_tuple(b.family != "dense", b.family, b.expansion, b.block_expansion,
                               b.deltanet_share, -b.capacity, b.stride);
      });
  // Each configuration's family names the law that predicts it.
  for (const Configuration& c : configurations) {
    const std::string& law = c.family;
    if (laws.count(law) > 0) continue;
    AnalysisOptions a;
    a.law = law;
    a.bootstrap = o.bootstrap;
    a.seed = o.seed;
    const auto f = fixed.find(law);
    if (f != fixed.end()) a.fixed = f->second;
    absl::StatusOr<LawReport> fit = FitNamedLaw(points, a);
    if (!fit.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", law, " law: ", fit.status().message()));
    }
    laws.emplace(law, std::move(*fit));
  }
  std::vector<CodesignCandidate> candidates;
  for (const Configuration& c : configurations) {
    for (const int64_t d : o.widths) {
      ASSIGN_OR_RETURN(CodesignCandidate cand, CandidateOf(c, d, o, o.vocab));
      candidates.push_back(std::move(cand));
    }
  }
  const LossModel loss = [&](const LawPoint& x) -> absl::StatusOr<LossPrediction> {
    // The point is a configuration's (Configuration::At): its family is its law.
    const auto it = laws.find(x.family);
    if (it == laws.end()) {
      return absl::InternalError(absl::StrCat("no ", x.family, " law fitted"));
    }
    LossPrediction p;
    ASSIGN_OR_RETURN(p.loss, it->second.Predict(x));
    for (size_t b = 0; b < it->second.refits.size(); ++b) {
      const absl::StatusOr<double> l = RefitModel(it->second, static_cast<int>(b)).Predict(x);
      if (l.ok() && std::isfinite(*l)) p.refits.push_back(*l);
    }
    return p;
  };
  CodesignOptions co;
  co.gpu_hours = o.gpu_hours;
  co.gpus = o.gpus;
  co.global_batch = std::max<int64_t>(1, o.global_batch_tokens / static_cast<int64_t>(o.context));
  ASSIGN_OR_RETURN(const CodesignResult r, Codesign(candidates, loss, cluster, eff, co));
  // How far the plan reaches beyond the runs the laws were fitted to.
  double reach = 1.0;
  for (const CodesignRow& row : r.rows) {
    reach = std::max({reach, row.n_active / n_max, n_min / row.n_active,
                      row.tokens / row.n_active / tpp_max, tpp_min * row.n_active / row.tokens});
  }
  const std::string extrapolation =
      reach > 1.5 ? absl::StrFormat(
                        "the candidates reach %.3gx beyond the fitted runs (N_active "
                        "%.3g to %.3g, D/N_active %.3g to %.3g)",
                        reach, n_min, n_max, tpp_min, tpp_max)
                  : "";
  if (!extrapolation.empty() && !o.extrapolate) {
    return absl::InvalidArgumentError(
        absl::StrCat(extrapolation,
                     "; a law says little that far out. --extrapolate answers anyway, "
                     "marked, or choose --widths inside the runs"));
  }
  if (!o.plot.empty()) RETURN_IF_ERROR(DrawCodesign(r, o.plot));
  if (o.format == "json") {
    nlohmann::json j = CodesignJson(r);
    j["runs"] = source;
    j["cluster"] = cluster.name;
    j["gpu_hours"] = o.gpu_hours;
    j["gpus"] = o.gpus;
    j["context"] = o.context;
    j["extrapolation"] = extrapolation;
    out << j.dump(2) << "\n";
    return absl::OkStatus();
  }
  out << absl::StrFormat(
      "%s on %d GPUs of %s for %g GPU-hours at context %g (%d sequences per step)\n", source,
      o.gpus, cluster.name, o.gpu_hours, o.context, co.global_batch);
  out << absl::StrFormat("%-34s %9s %9s %6s %8s %10s %24s %10s %s\n", "candidate", "N_active",
                         "N_total", "MFU", "memory", "tokens D", "loss [95% interval]",
                         "FLOPs-only", "layout");
  for (const CodesignRow& row : r.rows) {
    out << absl::StrFormat(
        "%-34s %9.3g %9.3g %6.3f %6.1fGB %10.3g %8.4f [%.4f, %.4f] %10.4f %s%s%s\n",
        row.candidate.name, row.n_active, row.n_total, row.layout.prediction.mfu,
        row.layout.prediction.memory_gb, row.tokens, row.loss, row.low, row.high,
        row.flops_only_loss, row.fits ? LayoutText(row.layout.layout) : "DOES NOT FIT",
        row.pareto ? "  pareto" : "", "");
  }
  if (r.best >= 0) {
    out << absl::StrFormat("wall-clock optimum: %s (P(best) over the refits %.2f)\n",
                           r.rows[r.best].candidate.name, r.p_best);
  }
  out << absl::StrFormat(
      "FLOPs-only optimum: %s (every candidate at C = %.3g model FLOPs, MFU %.3f)\n",
      r.rows[r.flops_best].candidate.name, r.model_flops, r.reference_mfu);
  out << (r.constraint.empty() ? std::string("the two agree\n")
                               : absl::StrCat("why they differ: ", r.constraint, "\n"));
  if (!extrapolation.empty()) out << "EXTRAPOLATING: " << extrapolation << "\n";
  for (const std::string& note : notes) out << "note: " << note << "\n";
  return absl::OkStatus();
}

}  // namespace xmod
