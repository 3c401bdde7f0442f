// `xmod advise`: reads a sweep's finished runs, asks orchestrator/fit/advise.h for
// the decision and prints it (a table for people, or JSON).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/family.h"
#include "common/status_macros.h"
#include "orchestrator/fit/calibrate.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/report/output.h"
#include "orchestrator/report/report.h"

namespace xmod {

namespace {

// A form's lack-of-fit verdict in one word.
std::string LackOfFitVerdict(const LackOfFit& t) {
  return !t.available ? "untestable" : t.rejected ? "REJECTED" : "not rejected";
}

std::string Range(const Interval& i, bool have) {
  return have ? fmt::format("[{:.4g}, {:.4g}]", i.low, i.high) : std::string("-");
}

}  // namespace

absl::StatusOr<std::vector<LawPoint>> AdvicePoints(const std::vector<JobResultRow>& jobs,
                                                   const PointOptions& base,
                                                   std::vector<std::string>* notes) {
  std::vector<LawPoint> points;
  std::set<std::string> seen;
  // Every law that judges a family against the dense reference (the registry's
  // two-stage laws) reads its family's runs and the dense ones.
  for (const LawSpec& law : Laws()) {
    if (!law.two_stage) continue;
    PointOptions o = base;
    o.law = law.name;
    for (LawPoint& x : FitPoints(jobs, o)) {
      if (seen.insert(x.id).second) points.push_back(std::move(x));
    }
  }
  std::map<std::string, int> unranked;
  for (const JobResultRow& j : jobs) {
    if (j.state != JobState::kSucceeded || seen.count(j.id) > 0) continue;
    ++unranked[std::string(FamilyName(j.family))];
  }
  for (const auto& [family, count] : unranked) {
    notes->push_back(fmt::format(
        "{}: {} finished run(s) not ranked (no law predicts this family; compare them with "
        "xmod results --pairs)",
        family, count));
  }
  return points;
}

namespace {

// The decision hold-out's part of PrintAdvice.
void PrintHoldout(const DecisionHoldout& h, std::ostream& out) {
  if (h.available) {
    std::vector<std::string> compared;
    for (const auto& r : h.rows) compared.push_back(r.configuration);
    out << fmt::format(
        "\ndecision hold-out: refitted without scale {} and larger ({} dense scales left), "
        "choosing among the {} configurations run there at C = {:.3g} FLOPs ({:.3g} tokens per "
        "parameter): {}\n",
        h.scale, h.dense_scales, h.rows.size(), h.compute, h.tokens_per_param,
        fmt::join(compared, ", "));
    QueryResult d;
    d.columns = {"configuration", "runs", "observed", "seed sd", "predicted"};
    for (const auto& r : h.rows) {
      d.rows.push_back({r.configuration, static_cast<int64_t>(r.runs), r.observed,
                        r.runs > 1 ? Value(r.observed_sd) : Value(), r.predicted});
    }
    PrintResult(d, Format::kTable, out);
    const std::string noise = h.noise > 0 ? fmt::format("{:.3g} nats", h.noise)
                                          : std::string("unknown: no replicates there");
    out << fmt::format(
        "chosen there: {}; best observed: {}; {}\n", h.chosen, h.observed_best,
        h.holds ? std::string("the decision holds")
        : h.fails
            ? fmt::format("the decision FAILS (the chosen one is {:.2f}% worse; noise sd of the "
                          "difference {})",
                          100.0 * h.regret, noise)
            : fmt::format("the hold-out cannot tell (the chosen one is {:.2f}% worse; noise sd of "
                          "the difference {})",
                          100.0 * h.regret, noise));
    if (h.pick_ran && h.pick != h.chosen) {
      out << (h.pick == h.observed_best
                  ? fmt::format("the advice's pick at C, {}, ran there too and was observed best\n",
                                h.pick)
                  : fmt::format("the advice's pick at C, {}, ran there too and was observed "
                                "{:.2f}% worse than {}\n",
                                h.pick, 100.0 * h.pick_regret, h.observed_best));
    }
  } else {
    out << "\ndecision hold-out: not available: " << h.why << "\n";
  }
}

}  // namespace

namespace {

// The competing X-MoD forms' part of PrintAdvice.
void PrintForms(const Advice& a, std::ostream& out) {
  const bool have = a.refits > 0;
  out << "\ncompeting X-MoD forms (lower AIC is better; held-out: the scales from the "
         "decisive one up)\n";
  QueryResult f;
  f.columns = {"form",          "AIC",        "params",  "lack of fit p", "verdict",
               "held-out RMSE", "picks at C", "P(best)", "hold-out pick"};
  for (const FormAdvice& form : a.forms) {
    if (!form.fitted) {
      f.rows.push_back({form.law, Value(), Value(), Value(), "not fitted: " + form.error, Value(),
                        Value(), Value(), Value()});
      continue;
    }
    f.rows.push_back({form.law + (form.law == a.form ? " (used)" : ""), form.information.aic,
                      static_cast<int64_t>(form.information.parameters),
                      form.lack_of_fit.available ? Value(form.lack_of_fit.p_value) : Value(),
                      LackOfFitVerdict(form.lack_of_fit),
                      form.holdout_rmse >= 0 ? Value(form.holdout_rmse) : Value(), form.best,
                      have ? Value(form.p_best) : Value(), form.holdout_choice});
  }
  PrintResult(f, Format::kTable, out);
  if (a.c_hat > 1.0) {
    out << fmt::format(
        "every form is rejected: their AICs compared as quasi-AIC, the fit term divided by "
        "c-hat = {:.3g} (the smallest F)\n",
        a.c_hat);
  }
  out << fmt::format(
      "difference in {}: {:.3g}{}\n", a.c_hat > 1.0 ? "quasi-AIC" : "AIC", a.delta_ic,
      a.forms_indistinguishable ? " (below 2: the forms are indistinguishable)" : "");
  out << (a.answer_changes ? "the forms pick DIFFERENT configurations at C\n"
                           : "the forms pick the same configuration at C\n");
}

}  // namespace

void PrintAdvice(const Advice& a, std::ostream& out) {
  out << fmt::format("advice at C = {:.3g} training FLOPs (6 N_active D), context T = {:g}{}\n",
                     a.options.compute, a.options.context,
                     a.options.n_active > 0
                         ? fmt::format(", N_active = {:.3g}", a.options.n_active)
                         : std::string(", each configuration at its compute-optimal N_active"));
  out << fmt::format("laws: {}; X-MoD form: {}; {} bootstrap refits\n", fmt::join(a.laws, ", "),
                     a.form.empty() ? std::string("none (no X-MoD runs)") : a.form, a.refits);
  out << fmt::format(
      "support: C in [{:.3g}, {:.3g}], N_active in [{:.3g}, {:.3g}], {:.3g}-{:.3g} tokens per "
      "active parameter, T in {{{}}}\n",
      a.compute_min, a.compute_max, a.n_min, a.n_max, a.tpp_min, a.tpp_max,
      fmt::join(a.contexts, ", "));
  for (const auto& [law, values] : a.options.fixed) {
    std::vector<std::string> parts;
    for (const auto& [name, value] : values) parts.push_back(fmt::format("{}={:g}", name, value));
    out << fmt::format("frozen in law {} by the sweep's design.fix: {}\n", law,
                       fmt::join(parts, ", "));
  }
  if (!a.extrapolation.empty()) out << "EXTRAPOLATING: " << a.extrapolation << "\n";
  const int pct = static_cast<int>(std::lround(100.0 * a.options.confidence));
  QueryResult t;
  t.columns = {"configuration",
               "law",
               "N_active",
               "N_total",
               "D",
               "loss",
               fmt::format("loss {}%", pct),
               "gain_vs_dense",
               fmt::format("gain {}%", pct),
               "P(best)"};
  const bool have = a.refits > 0;
  for (const ConfigurationAdvice& r : a.rows) {
    t.rows.push_back(
        {r.configuration.name + (r.at_edge ? " *" : "") + (r.extrapolation.empty() ? "" : " !"),
         r.law, r.n_active, r.n_active * r.configuration.total_ratio, r.tokens, r.loss,
         Range(r.loss_interval, have), r.gain, Range(r.gain_interval, have),
         have ? Value(r.p_best) : Value()});
  }
  PrintResult(t, Format::kTable, out);
  out << "gain_vs_dense: the dense model's predicted loss at the same C minus this one's "
         "(nats; > 0 is better); P(best): share of refits in which it is lowest; *: optimum on "
         "the searched range's edge; !: outside its own runs (notes below)\n";
  if (!a.forms.empty()) PrintForms(a, out);
  if (!a.dense_forms.empty()) {
    out << "\nthe dense reference's forms (on the dense runs; lower AIC is better): per context, "
           "and one law with a context term L = (E + A/N^alpha + B/D^beta)(T/1024)^-kappa\n";
    QueryResult f;
    f.columns = {"form", "AIC", "params", "lack of fit p", "verdict", "held-out RMSE"};
    for (const FormAdvice& form : a.dense_forms) {
      if (!form.fitted) {
        f.rows.push_back(
            {form.law, Value(), Value(), Value(), "not fitted: " + form.error, Value()});
        continue;
      }
      f.rows.push_back({form.law, form.information.aic,
                        static_cast<int64_t>(form.information.parameters),
                        form.lack_of_fit.available ? Value(form.lack_of_fit.p_value) : Value(),
                        LackOfFitVerdict(form.lack_of_fit),
                        form.holdout_rmse >= 0 ? Value(form.holdout_rmse) : Value()});
    }
    PrintResult(f, Format::kTable, out);
    if (a.dense_forms.size() > 1 && a.dense_forms[1].fitted) {
      out << fmt::format(
          "kappa = {:.4g}{}", a.kappa,
          a.context_from_law && a.refits > 0
              ? fmt::format(" [{:.4g}, {:.4g}]", a.kappa_interval.low, a.kappa_interval.high)
              : std::string());
      out << (a.context_from_law
                  ? fmt::format("; T = {:g} was not run: every prediction above reads its dense "
                                "reference from this law (EXTRAPOLATED in T)\n",
                                a.options.context)
                  : std::string("; the table above uses the dense law fitted at T itself\n"));
    }
  }
  PrintHoldout(a.holdout, out);
  for (const std::string& note : a.notes) out << "note: " << note << "\n";
  out << "\nverdict: " << a.verdict << "\n";
}

absl::StatusOr<Advice> AdviseSweep(StoreReader& store, const std::string& sweep,
                                   AdviseOptions options, const std::string& metric, int* runs,
                                   std::vector<LawPoint>* points_out) {
  if (metric != "auto" && metric != "val_loss" && metric != "val_loss_causal") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metric ", metric, ": unknown metric (known: auto, val_loss, val_loss_causal)"));
  }
  ASSIGN_OR_RETURN(const std::vector<JobResultRow> jobs, store.JobResultRows(sweep));
  PointOptions point_options;
  point_options.metric = metric;
  std::vector<std::string> notes;
  ASSIGN_OR_RETURN(const std::vector<LawPoint> points, AdvicePoints(jobs, point_options, &notes));
  if (points.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sweep '", sweep, "': no finished run a law reads yet (", jobs.size(), " jobs)"));
  }
  if (options.compute == 0) options.compute = DefaultCompute(points);
  if (options.context == 0) {
    for (const LawPoint& x : points) options.context = std::max(options.context, x.context);
  }
  ASSIGN_OR_RETURN(options.fixed, SweepDesignFix(store, sweep));
  ASSIGN_OR_RETURN(Advice advice, Advise(points, options));
  advice.notes.insert(advice.notes.end(), notes.begin(), notes.end());
  if (runs != nullptr) *runs = static_cast<int>(points.size());
  if (points_out != nullptr) *points_out = points;
  return advice;
}

absl::Status RunAdviseCommand(const AdviseCommandOptions& o, std::ostream& out) {
  ASSIGN_OR_RETURN(Format format, ParseFormat(o.format));
  if (format == Format::kCsv) {
    return absl::InvalidArgumentError("--format: advise prints table or json");
  }
  SqliteStore::Options store_options;
  store_options.path = o.db;
  store_options.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(store_options));
  if (o.calibrate == 1 || o.calibrate < 0) {
    return absl::InvalidArgumentError("--calibrate: at least 2 simulated sweeps");
  }
  if (o.misfit >= 0 && o.calibrate == 0) {
    return absl::InvalidArgumentError("--misfit: only with --calibrate");
  }
  int runs = 0;
  std::vector<LawPoint> points;
  ASSIGN_OR_RETURN(Advice advice, AdviseSweep(*store, o.sweep, o.advise, o.metric, &runs, &points));
  std::optional<Calibration> calibration;
  if (o.calibrate > 0) {
    ASSIGN_OR_RETURN(calibration,
                     CalibrateAdvice(advice, points, o.calibrate, o.misfit, o.advise.seed + 1));
  }
  if (format == Format::kJson) {
    nlohmann::json j = AdviceJson(advice);
    j["sweep"] = o.sweep;
    if (calibration.has_value()) j["calibration"] = CalibrationJson(*calibration);
    out << j.dump(2) << "\n";
  } else {
    out << fmt::format("sweep '{}': {} runs read by the laws\n", o.sweep, runs);
    PrintAdvice(advice, out);
    if (calibration.has_value()) out << "\n" << CalibrationText(*calibration);
  }
  return absl::OkStatus();
}

}  // namespace xmod
