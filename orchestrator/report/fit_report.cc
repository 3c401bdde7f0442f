#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/accounting.h"
#include "common/status_macros.h"
#include "orchestrator/fit/law_csv.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

namespace {

std::string Percent(double confidence, bool low) {
  const double tail = (1.0 - confidence) / 2.0 * 100.0;
  return fmt::format("{:g}%", low ? tail : 100.0 - tail);
}

// One row per parameter, with its interval where the fit has them.
void PrintParameters(const std::map<std::string, double>& params,
                     const std::map<std::string, Interval>& intervals, double confidence,
                     std::ostream& out) {
  QueryResult t;
  t.columns = {"parameter", "value"};
  if (!intervals.empty()) {
    t.columns.push_back(Percent(confidence, true));
    t.columns.push_back(Percent(confidence, false));
  }
  for (const auto& [name, value] : params) {
    std::vector<Value> row{name, value};
    if (!intervals.empty()) {
      row.emplace_back(intervals.at(name).low);
      row.emplace_back(intervals.at(name).high);
    }
    t.rows.push_back(std::move(row));
  }
  PrintResult(t, Format::kTable, out);
}

// A point's input by the CSV column it comes from, as a hold-out table shows it.
Value InputValue(const LawPoint& x, const std::string& column) {
  if (column == "capacity") return x.capacity;
  if (column == "stride") return static_cast<int64_t>(x.stride);
  if (column == "expansion") return x.expansion;
  const auto extra = x.extra.find(column);
  return extra == x.extra.end() ? Value() : Value(extra->second);
}

void PrintReport(const LawReport& r, const AnalysisOptions& options, std::ostream& out) {
  out << fmt::format(
      "law {} ({}): {} points, summed Huber objective {:.6g}, RMSE of log-loss "
      "{:.4g}, {} starts, {}, {:.2f} s\n",
      r.law, r.method, r.fit.n_points, r.fit.objective, r.fit.rmse, r.fit.starts,
      r.fit.converged ? "converged" : "NOT CONVERGED (best start hit its limit)", r.seconds);
  // The verdict comes before the parameters: those of a rejected form are shown
  // under a heading that says so.
  out << DescribeLackOfFit(r.lack_of_fit) << "\n";
  if (r.information.available) {
    out << fmt::format(
        "information criterion: AIC {:.2f} ({} free parameters, {} points, residuals read "
        "against a log-loss sd of {:.3g} from the {}); compare forms on the same points\n",
        r.information.aic, r.information.parameters, r.information.points, r.information.sigma,
        r.information.noise == "replicates" ? "seed replicates" : "residuals themselves");
  }
  if (r.lack_of_fit.rejected) {
    out << fmt::format("parameters of a form rejected by its replicates (p = {:.2g}):\n",
                       r.lack_of_fit.p_value);
  }
  PrintParameters(r.fit.params, r.intervals, options.confidence, out);
  if (!r.intervals.empty()) {
    const int total = r.bootstrap_used + r.bootstrap_failed;
    out << fmt::format(
        "intervals: percentile bootstrap over {} configurations (replicates resampled "
        "together), refits from the optima and a thinned start grid; {} of {} "
        "resamples fitted, {} failed ({:.1f}%), seed {}\n",
        r.bootstrap_clusters, r.bootstrap_used, total, r.bootstrap_failed,
        total > 0 ? 100.0 * r.bootstrap_failed / total : 0.0, options.seed);
    if (!r.bootstrap_failure.empty()) {
      out << fmt::format("commonest failure of a resample: {}\n", r.bootstrap_failure);
    }
  }
  const LawSpec* spec = FindLaw(r.law);
  if (!r.derived.empty() && spec != nullptr) {
    out << spec->derived_note << ":\n";
    QueryResult d;
    d.columns = {"quantity", "value"};
    if (!r.derived_intervals.empty()) {
      d.columns.push_back(Percent(options.confidence, true));
      d.columns.push_back(Percent(options.confidence, false));
    }
    for (const auto& [name, value] : r.derived) {
      std::vector<Value> row{name, value};
      if (!r.derived_intervals.empty()) {
        const auto iv = r.derived_intervals.find(name);
        row.push_back(iv == r.derived_intervals.end() ? Value() : Value(iv->second.low));
        row.push_back(iv == r.derived_intervals.end() ? Value() : Value(iv->second.high));
      }
      d.rows.push_back(std::move(row));
    }
    PrintResult(d, Format::kTable, out);
  }
  if (!r.fixed.empty()) {
    out << fmt::format("frozen (--fix): {}\n", fmt::join(r.fixed, ", "));
  }
  out << fmt::format("on a bound: {}\n", r.on_bound.empty()
                                             ? std::string("none")
                                             : fmt::format("{}", fmt::join(r.on_bound, ", ")));
  const LawSpec* law = FindLaw(r.law);
  const bool two_stage = law != nullptr && law->two_stage;
  if (two_stage || r.dense.size() > 1) {
    // The per-context fits: the dense law (reference) of a two-stage law.
    for (const ContextFit& c : r.dense) {
      out << fmt::format(
          "\n{} law at T = {:g}: {} points, objective {:.6g}, RMSE {:.4g}{}{}\n",
          two_stage ? std::string("dense") : r.law, c.context, c.fit.n_points, c.fit.objective,
          c.fit.rmse, c.fit.converged ? "" : ", NOT CONVERGED",
          c.on_bound.empty() ? "" : fmt::format(", on a bound: {}", fmt::join(c.on_bound, ", ")));
      PrintParameters(c.fit.params, c.intervals, options.confidence, out);
    }
  }
  if (two_stage && r.stages.size() == 2) {
    out << fmt::format(
        "extras on the {} runs (each against the dense law at its context): "
        "{} points, objective {:.6g}, RMSE {:.4g}{}\n",
        law->runs_name, r.stages[1].n_points, r.stages[1].objective, r.stages[1].rmse,
        r.stages[1].converged ? "" : ", NOT CONVERGED");
  }
  out << fmt::format(
      "noise: {} configurations, {} with 2+ seeds, median seed sd {:.2f}% of the loss; "
      "median evaluation SE {:.2f}% ({} points)\n",
      r.noise.configurations, r.noise.replicated, 100.0 * r.noise.seed_sd, 100.0 * r.noise.eval_se,
      r.noise.with_se);
  if (!r.holdout.empty()) {
    out << fmt::format(
        "\nheld out: scale {} ({} runs), fitted on the other scales; RMSE of "
        "log-loss {:.4g} (about {:.2f}% of the loss) against a seed noise of "
        "{:.2f}% and an evaluation SE of {:.2f}%\n",
        r.holdout_scale, r.holdout.size(), r.holdout_rmse, 100.0 * r.holdout_rmse,
        100.0 * r.noise.seed_sd, 100.0 * r.noise.eval_se);
    QueryResult h;
    const std::vector<std::string> inputs =
        law != nullptr ? law->holdout_columns : std::vector<std::string>{};
    h.columns = {"run", "N_active", "N_total", "D", "T"};
    h.columns.insert(h.columns.end(), inputs.begin(), inputs.end());
    for (const char* c : {"observed", "predicted", "error_pct"}) h.columns.push_back(c);
    for (const HoldoutPoint& p : r.holdout) {
      std::vector<Value> row{p.point.id, p.point.n, p.point.NTotal(), p.point.d, p.point.context};
      for (const std::string& input : inputs) row.push_back(InputValue(p.point, input));
      for (double v : {p.point.loss, p.predicted, 100.0 * (p.predicted / p.point.loss - 1.0)}) {
        row.emplace_back(v);
      }
      h.rows.push_back(std::move(row));
    }
    PrintResult(h, Format::kTable, out);
  }
}

QueryResult ReportCsv(const LawReport& r) {
  QueryResult t;
  t.columns = {"name", "value", "low", "high"};
  for (const auto& [name, value] : r.fit.params) {
    auto it = r.intervals.find(name);
    t.rows.push_back({name, value, it == r.intervals.end() ? Value{} : Value{it->second.low},
                      it == r.intervals.end() ? Value{} : Value{it->second.high}});
  }
  t.rows.push_back({std::string("objective"), r.fit.objective, Value{}, Value{}});
  t.rows.push_back({std::string("rmse"), r.fit.rmse, Value{}, Value{}});
  t.rows.push_back({std::string("n_points"), int64_t{r.fit.n_points}, Value{}, Value{}});
  if (!r.holdout.empty()) {
    t.rows.push_back({std::string("holdout_rmse"), r.holdout_rmse, Value{}, Value{}});
  }
  return t;
}

}  // namespace

LawPoint ToLawPoint(const JobResultRow& j, const PointOptions& options) {
  LawPoint p;
  p.id = j.id;
  p.scale = j.scale;
  p.config = j.config_key;
  p.cluster = j.cluster_key;
  p.family = std::string(FamilyName(j.family));
  const double extra = options.total_params ? j.n_embedding : 0.0;
  p.n = j.n_active + extra;
  p.n_total = j.n_total + extra;
  // What the job trained on (whole steps), not the budget it was sized for.
  p.d = static_cast<double>(j.tokens_trained > 0 ? j.tokens_trained : j.tokens);
  p.loss = j.Loss(options.metric).value_or(0.0);
  const bool top_k_loss = options.metric == "val_loss" || !j.causal_metric();
  p.se = (top_k_loss ? j.final_val_loss_se : j.final_val_loss_causal_se).value_or(0.0);
  p.context = static_cast<double>(j.context);
  p.layers = static_cast<double>(j.n_layers);
  if (j.experts_family()) {
    // Every token passes every layer; a moe run's sparsity is in its experts.
    p.stride = 1.0;
    p.capacity = 1.0;
    if (j.top_k > 0) {  // a fixed number of experts per token (moe)
      p.expansion = static_cast<double>(j.experts) / static_cast<double>(j.top_k);
    }
    return p;
  }
  if (j.family == Family::kGdn) {
    // A gdn run: its stored sparsity is its share of Gated DeltaNet layers.
    p.stride = 1.0;
    p.capacity = 1.0;
    p.deltanet_share = j.sparsity;
    return p;
  }
  if (Traits(j.family).routing == RoutingKind::kLayers) {
    // A MoL run: every token passes every stage; its sparsity is in its blocks.
    p.stride = 1.0;
    p.capacity = 1.0;
    p.block_expansion =
        j.top_k > 0 ? static_cast<double>(j.experts) / static_cast<double>(j.top_k) : 1.0;
    return p;
  }
  const bool dense = !j.routed();
  p.stride = dense ? 1.0 : static_cast<double>(j.stride);
  p.capacity = dense ? 1.0
                     : static_cast<double>(RoutedTokens(j.capacity, j.context)) /
                           static_cast<double>(j.context);
  return p;
}

absl::StatusOr<QueryResult> ResultsTable(StoreReader* store, const std::string& sweep) {
  ASSIGN_OR_RETURN(QueryResult rows, store->JobResults(sweep));
  // The configuration key is for grouping (--by-config), not for reading.
  for (size_t c = 0; c < rows.columns.size(); ++c) {
    if (rows.columns[c] != "config_key") continue;
    rows.columns.erase(rows.columns.begin() + static_cast<std::ptrdiff_t>(c));
    for (auto& row : rows.rows) row.erase(row.begin() + static_cast<std::ptrdiff_t>(c));
    break;
  }
  return rows;
}

std::vector<LawPoint> FitPoints(const std::vector<JobResultRow>& jobs,
                                const PointOptions& options) {
  const LawSpec* law = FindLaw(options.law);
  const std::vector<std::string> families =
      law != nullptr ? law->families : std::vector<std::string>{};
  std::vector<LawPoint> points;
  for (const JobResultRow& j : BestLrRuns(jobs)) {
    if (j.state != JobState::kSucceeded || !j.Loss(options.metric).has_value()) continue;
    if (j.role == JobRole::kTrunk) continue;  // its loss is taken before any cooldown
    if (std::count(families.begin(), families.end(), std::string(FamilyName(j.family))) == 0) {
      continue;
    }
    points.push_back(ToLawPoint(j, options));
  }
  return points;
}

QueryResult BaselineComparison(const std::vector<JobResultRow>& jobs) {
  QueryResult t;
  t.columns = {"baseline",   "family",       "scale",       "context", "seed",
               "experts",    "matched_to",   "matched_job", "loss",    "matched_loss",
               "loss_ratio", "params_ratio", "flops_ratio"};
  for (const JobResultRow& b : jobs) {
    if (!(b.experts_family() || Traits(b.family).routing == RoutingKind::kLayers) ||
        b.matched_to.empty()) {
      continue;
    }
    double sparsity = 0.0;
    int64_t stride = 0;
    const bool xmod = b.MatchedXmodPoint(&sparsity, &stride);
    const JobResultRow* match = nullptr;
    for (const JobResultRow& j : jobs) {
      if (j.scale != b.scale || j.context != b.context || j.seed != b.seed ||
          j.budget_kind != b.budget_kind || j.budget_value != b.budget_value) {
        continue;
      }
      const bool hit = xmod ? j.family == Family::kXmod && j.stride == stride &&
                                  std::abs(j.sparsity - sparsity) < 1e-9
                            : !j.routed();
      if (hit) {
        match = &j;
        break;
      }
    }
    std::vector<Value> row = {
        b.id,
        std::string(FamilyName(b.family)),
        b.scale,
        b.context,
        b.seed,
        fmt::format("{}{}", b.experts,
                    b.top_k > 0 ? fmt::format(" top-{}", b.top_k) : std::string()),
        b.matched_to};
    const std::optional<double> loss =
        b.state == JobState::kSucceeded ? b.Loss("auto") : std::nullopt;
    const std::optional<double> other = match != nullptr && match->state == JobState::kSucceeded
                                            ? match->Loss("auto")
                                            : std::nullopt;
    const double loss_value = loss.value_or(0.0), other_value = other.value_or(0.0);
    row.push_back(match != nullptr ? Value(match->id) : Value());
    row.push_back(loss.has_value() ? Value(loss_value) : Value());
    row.push_back(other.has_value() ? Value(other_value) : Value());
    row.push_back(loss.has_value() && other.has_value() ? Value(loss_value / other_value)
                                                        : Value());
    row.push_back(match != nullptr ? Value(b.n_total / match->n_total) : Value());
    row.push_back(match != nullptr ? Value(b.flops_per_token / match->flops_per_token) : Value());
    t.rows.push_back(std::move(row));
  }
  return t;
}

QueryResult ReplicateTable(const std::vector<JobResultRow>& jobs) {
  struct Group {
    const JobResultRow* first = nullptr;
    std::vector<double> losses, ses;
    int jobs = 0;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const JobResultRow& j : jobs) {
    const std::string key = j.config_key.empty() ? j.id : j.config_key;
    Group& g = groups[key];
    if (g.first == nullptr) {
      g.first = &j;
      order.push_back(key);
    }
    ++g.jobs;
    const std::optional<double> loss = j.Loss("auto");
    if (j.state == JobState::kSucceeded && loss.has_value()) {
      g.losses.push_back(*loss);
      const std::optional<double> se =
          j.causal_metric() ? j.final_val_loss_causal_se : j.final_val_loss_se;
      if (se.has_value()) g.ses.push_back(*se);
    }
  }
  QueryResult t;
  t.columns = {"family",      "scale",        "sparsity",    "stride",   "context",
               "budget_kind", "budget_value", "seeds",       "finished", "mean_loss",
               "seed_sd",     "seed_sd_pct",  "mean_eval_se"};
  for (const std::string& key : order) {
    const Group& g = groups[key];
    const JobResultRow& j = *g.first;
    std::vector<Value> row{std::string(FamilyName(j.family)),
                           j.scale,
                           j.sparsity,
                           j.stride,
                           j.context,
                           j.budget_kind,
                           j.budget_value,
                           int64_t{g.jobs},
                           static_cast<int64_t>(g.losses.size())};
    if (g.losses.empty()) {
      row.resize(row.size() + 4);  // no mean, sd, sd % or SE
    } else {
      double mean = 0;
      for (double v : g.losses) mean += v;
      mean /= static_cast<double>(g.losses.size());
      row.emplace_back(mean);
      if (g.losses.size() >= 2) {
        double squares = 0;
        for (double v : g.losses) squares += (v - mean) * (v - mean);
        const double sd = std::sqrt(squares / static_cast<double>(g.losses.size() - 1));
        row.emplace_back(sd);
        row.emplace_back(100.0 * sd / mean);
      } else {
        row.resize(row.size() + 2);  // no sd or sd %
      }
      if (g.ses.empty()) {
        row.resize(row.size() + 1);
      } else {
        double m = 0;
        for (double v : g.ses) m += v;
        row.emplace_back(m / static_cast<double>(g.ses.size()));
      }
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

namespace {

// The flags of `xmod fit` checked together; returns the --fix values by name.
absl::StatusOr<std::map<std::string, double>> CheckFitOptions(const FitCommandOptions& o) {
  if (o.csv.empty() == o.sweep.empty()) {
    return absl::InvalidArgumentError("xmod fit: give a SWEEP (with --db FILE) or --csv FILE");
  }
  if (!o.sweep.empty() && o.db.empty()) {
    return absl::InvalidArgumentError("xmod fit SWEEP: --db FILE is required");
  }
  if (FindLaw(o.law) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--law ", o.law, ": unknown law (known: ", absl::StrJoin(LawNames(), ", "), ")"));
  }
  if (o.granularity != 0 && (o.law != "moe" || o.granularity < 0)) {
    return absl::InvalidArgumentError(o.granularity < 0
                                          ? "--granularity: must be positive"
                                          : "--granularity: only the moe law reads MoE runs");
  }
  if (o.granularity != 0 && !o.csv.empty()) {
    return absl::InvalidArgumentError(
        "--granularity chooses among a sweep's MoE runs; a CSV file has no granularity column");
  }
  if (o.metric != "auto" && o.metric != "val_loss" && o.metric != "val_loss_causal") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", o.metric, ": unknown metric (known: auto, val_loss, val_loss_causal)"));
  }
  if (o.params != "non-embedding" && o.params != "total") {
    return absl::InvalidArgumentError(
        absl::StrCat("--params ", o.params, ": unknown count (known: non-embedding, total)"));
  }
  std::map<std::string, double> fixed;
  for (const std::string& f : o.fix) {
    ASSIGN_OR_RETURN(const auto name_value, ParseNameValue(f, "--fix", "beta_T=0.5"));
    if (!fixed.insert(name_value).second) {
      return absl::InvalidArgumentError(absl::StrCat("--fix ", name_value.first, ": given twice"));
    }
  }
  return fixed;
}

// The moe law has no granularity term, so it reads the MoE runs of one granularity: --granularity
// G, or the only one the sweep's finished MoE runs have. Several without --granularity is an error
// that lists them.
absl::Status KeepOneGranularity(const FitCommandOptions& o, std::vector<JobResultRow>* jobs) {
  std::set<int64_t> seen;
  for (const JobResultRow& j : *jobs) {
    if (j.family == Family::kMoe && j.state == JobState::kSucceeded) seen.insert(j.granularity);
  }
  if (o.granularity == 0) {
    if (seen.size() <= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(fmt::format(
        "sweep '{}': its MoE runs span granularities {}; the moe law has no granularity term, "
        "so fit one at a time with --granularity G",
        o.sweep, fmt::join(seen, ", ")));
  }
  if (seen.count(o.granularity) == 0) {
    return absl::InvalidArgumentError(fmt::format(
        "--granularity {}: no finished MoE run of sweep '{}' has it (they have: {})", o.granularity,
        o.sweep, seen.empty() ? std::string("none") : fmt::format("{}", fmt::join(seen, ", "))));
  }
  std::vector<JobResultRow> kept;
  for (JobResultRow& j : *jobs) {
    if (j.family != Family::kMoe || j.granularity == o.granularity) kept.push_back(std::move(j));
  }
  *jobs = std::move(kept);
  return absl::OkStatus();
}

// The points the law is fitted to: a CSV file's, or a sweep's succeeded runs
// (opening the sweep's store into `store`), then only those at --context.
absl::StatusOr<std::vector<LawPoint>> LoadFitPoints(const FitCommandOptions& o,
                                                    std::unique_ptr<SqliteStore>* store_out) {
  PointOptions point_options;
  point_options.metric = o.metric;
  point_options.total_params = o.params == "total";
  point_options.law = o.law;
  std::vector<LawPoint> points;
  if (!o.csv.empty()) {
    if (o.metric != "auto" || o.params != "non-embedding") {
      return absl::InvalidArgumentError(
          "--metric and --params choose among a sweep's columns; a CSV file gives one loss and N");
    }
    ASSIGN_OR_RETURN(points, ReadLawCsv(o.csv, o.law));
  } else {
    // A mistyped --db is an error, not a new empty database.
    if (!std::filesystem::exists(o.db)) {
      return absl::NotFoundError(absl::StrCat(o.db, ": no such database"));
    }
    SqliteStore::Options store_options;
    store_options.path = o.db;
    ASSIGN_OR_RETURN(*store_out, SqliteStore::Open(store_options));
    ASSIGN_OR_RETURN(std::vector<JobResultRow> jobs, (*store_out)->JobResultRows(o.sweep));
    if (o.law == "moe") RETURN_IF_ERROR(KeepOneGranularity(o, &jobs));
    points = FitPoints(jobs, point_options);
    if (points.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sweep '", o.sweep, "': no succeeded ", absl::StrJoin(FindLaw(o.law)->families, " or "),
          " job with a final ",
          o.metric == "val_loss" ? "val_loss" : "loss (val_loss_causal for routed runs)", " yet (",
          jobs.size(), " jobs)"));
    }
  }
  if (o.context > 0) {
    std::vector<LawPoint> at;
    for (const LawPoint& x : points) {
      if (x.context == static_cast<double>(o.context)) at.push_back(x);
    }
    if (at.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--context ", o.context, ": no run at that context"));
    }
    points = std::move(at);
  }
  return points;
}

// Appends the fit to the sweep's `fits` table; returns its fit_id.
absl::StatusOr<int64_t> StoreFit(SqliteStore& store, const std::string& sweep,
                                 const LawReport& report, const nlohmann::json& json) {
  FitRecord record;
  record.method = report.method;
  record.holdout_scale = report.holdout_scale;
  record.law = report.law;
  record.points_hash = json.at("points_hash").get<std::string>();
  record.n_points = report.fit.n_points;
  record.params_json = nlohmann::json(report.fit.params).dump();
  record.objective = report.fit.objective;
  record.rmse = report.fit.rmse;
  record.result_json = json.dump();
  return store.RecordFit(sweep, record);
}

}  // namespace

absl::StatusOr<std::pair<std::string, double>> ParseNameValue(const std::string& item,
                                                              const std::string& flag,
                                                              const std::string& example) {
  const size_t eq = item.find('=');
  double value = 0;
  if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(item.substr(eq + 1), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", item, ": expected NAME=VALUE (e.g. ", flag, " ", example, ")"));
  }
  return std::make_pair(item.substr(0, eq), value);
}

absl::StatusOr<DesignFix> SweepDesignFix(StoreReader& store, const std::string& sweep) {
  ASSIGN_OR_RETURN(const SweepText text, store.SweepSpecText(sweep));
  absl::StatusOr<SweepSpec> spec = ParseSweepSpec(text.yaml, text.source);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat("sweep '", sweep,
                                     "': its stored text no longer parses, so "
                                     "its design.fix cannot be read (give --fix): ",
                                     spec.status().message()));
  }
  return spec->design.fix;
}

absl::Status RunFitCommand(const FitCommandOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(o.format));
  using FixedValues = std::map<std::string, double>;
  ASSIGN_OR_RETURN(FixedValues fixed, CheckFitOptions(o));
  std::unique_ptr<SqliteStore> store;
  ASSIGN_OR_RETURN(const std::vector<LawPoint> points, LoadFitPoints(o, &store));
  // The sweep's design.fix for this law, unless --fix says otherwise.
  std::string frozen_by_design;
  if (store != nullptr && o.fix.empty()) {
    ASSIGN_OR_RETURN(const DesignFix design_fix, SweepDesignFix(*store, o.sweep));
    const auto it = design_fix.find(o.law);
    if (it != design_fix.end()) {
      fixed = it->second;
      std::vector<std::string> parts;
      for (const auto& [name, value] : fixed) parts.push_back(fmt::format("{}={:g}", name, value));
      frozen_by_design = fmt::format("{}", fmt::join(parts, ", "));
    }
  }
  AnalysisOptions options;
  options.law = o.law;
  options.joint = o.joint;
  options.bootstrap = o.bootstrap;
  options.seed = o.seed;
  options.holdout_largest = o.holdout_largest;
  options.exclude_top_loss = o.exclude_top_loss;
  options.fit.threads = o.threads;
  options.fixed = fixed;
  ASSIGN_OR_RETURN(LawReport report, FitNamedLaw(points, options));

  nlohmann::json json = ReportJson(report);
  const std::string metric_used =
      !o.csv.empty()
          ? "loss column"
          : (o.metric == "val_loss" ? "val_loss (top-k) for every run"
                                    : "val_loss_causal for routed runs, val_loss for dense");
  json["metric"] = metric_used;
  json["params_counted"] = o.params;
  json["points_hash"] = PointsHash(report.points);
  if (!frozen_by_design.empty()) json["fixed_by"] = "design.fix";
  if (store != nullptr) {
    ASSIGN_OR_RETURN(const int64_t fit_id, StoreFit(*store, o.sweep, report, json));
    json["fit_id"] = fit_id;
  }
  if (format == Format::kJson) {
    out << json.dump(2) << "\n";
  } else if (format == Format::kCsv) {
    PrintResult(ReportCsv(report), format, out);
  } else {
    out << fmt::format("metric: {}; N: {} parameters; D: tokens trained (steps x batch)\n",
                       metric_used, o.params);
    if (!frozen_by_design.empty()) {
      out << fmt::format("frozen by the sweep's design.fix: {} (override with --fix)\n",
                         frozen_by_design);
    }
    PrintReport(report, options, out);
    if (json.contains("fit_id")) {
      out << fmt::format("stored as fit {} of sweep '{}' (points {})\n",
                         json["fit_id"].get<int64_t>(), o.sweep,
                         json["points_hash"].get<std::string>());
    }
  }
  return absl::OkStatus();
}

}  // namespace xmod
