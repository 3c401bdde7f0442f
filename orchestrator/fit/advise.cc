#include "orchestrator/fit/advise.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "orchestrator/fit/advise_parts.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/fit/stages.h"

namespace xmod {

namespace advise_parts {

// The configuration a point belongs to, by name ("" for a point no law ranks).
std::string ConfigurationName(const LawPoint& x) {
  if (x.dense()) return "dense";
  if (x.block_expansion > 0.0) return absl::StrFormat("mol E_b=%g", x.block_expansion);
  if (x.deltanet_share > 0.0) return absl::StrFormat("gdn share=%g", x.deltanet_share);
  if (x.expansion > 1.0) return absl::StrFormat("moe E/k=%g", x.expansion);
  return absl::StrFormat("xmod sparsity=%g stride=%g", 1.0 - x.capacity, x.stride);
}

double PredictOr(const LawReport& model, const LawPoint& x) {
  const absl::StatusOr<double> loss = model.Predict(x);
  return loss.ok() && std::isfinite(*loss) && *loss > 0 ? *loss
                                                        : std::numeric_limits<double>::infinity();
}

// Fits `law` to `points` with the advice's settings.
absl::StatusOr<LawReport> FitForAdvice(const std::string& law, const std::vector<LawPoint>& points,
                                       const AdviseOptions& o, int bootstrap) {
  AnalysisOptions a;
  a.law = law;
  a.bootstrap = bootstrap;
  a.seed = o.seed;
  a.confidence = o.confidence;
  a.fit.threads = o.threads;
  const auto fixed = o.fixed.find(law);
  if (fixed != o.fixed.end()) a.fixed = fixed->second;
  return FitNamedLaw(points, a);
}

// The RMSE of log-loss of `fitted` on the held-out points its law reads.
void HeldOutError(const LawReport& fitted, const std::vector<LawPoint>& held, FormAdvice* form) {
  const LawSpec* spec = FindLaw(fitted.law);
  double squares = 0.0;
  int count = 0;
  for (const LawPoint& x : held) {
    if (spec == nullptr || !spec->reads(x)) continue;
    const double p = PredictOr(fitted, x);
    if (!std::isfinite(p)) continue;
    squares += std::pow(std::log(x.loss) - std::log(p), 2);
    ++count;
  }
  form->holdout_points = count;
  form->holdout_rmse = count > 0 ? std::sqrt(squares / count) : -1.0;
}

}  // namespace advise_parts

namespace {

using advise_parts::CompareForms;
using advise_parts::Configurations;
using advise_parts::FitForAdvice;
using advise_parts::Model;
using advise_parts::OwnSearches;
using advise_parts::Rank;
using advise_parts::Ranked;
using advise_parts::Ranking;
using advise_parts::Search;
using advise_parts::Support;
using advise_parts::SupportNotes;
using advise_parts::Verdict;

absl::Status CheckOptions(const AdviseOptions& o) {
  if (!(o.compute > 0) || !std::isfinite(o.compute)) {
    return absl::InvalidArgumentError("--compute: a positive number of training FLOPs is needed");
  }
  if (!(o.n_active >= 0) || !std::isfinite(o.n_active)) {
    return absl::InvalidArgumentError("--n-active: must be a positive number of parameters");
  }
  if (!(o.confidence > 0 && o.confidence < 1)) {
    return absl::InvalidArgumentError("confidence must be in (0, 1)");
  }
  if (o.bootstrap < 0) return absl::InvalidArgumentError("--bootstrap: must be >= 0");
  if (!(o.context > 0) || !std::isfinite(o.context)) {
    return absl::InvalidArgumentError("--context: a positive context length T is needed");
  }
  return absl::OkStatus();
}

// The dense reference's two forms into a->dense_forms when the runs span two or
// more contexts (or T was not run); the dense-context law, which answers a
// context the sweep did not run, when it was fitted.
absl::StatusOr<std::optional<LawReport>> FitDenseForms(const std::vector<LawPoint>& points,
                                                       const AdviseOptions& o, Advice* a) {
  std::optional<LawReport> context_law;
  if (a->contexts.size() < 2 || !(o.dense_forms || a->context_from_law)) return context_law;
  for (const std::string law : {"dense", "dense-context"}) {
    FormAdvice f;
    f.law = law;
    const bool answers = law != "dense" && a->context_from_law;
    absl::StatusOr<LawReport> fitted = FitForAdvice(law, points, o, answers ? o.bootstrap : 0);
    if (!fitted.ok()) {
      f.error = std::string(fitted.status().message());
      if (answers) {
        return absl::InvalidArgumentError(
            absl::StrCat("--context ", absl::StrFormat("%g", o.context),
                         ": the dense law with a context term could not be fitted: ", f.error));
      }
    } else {
      f.fitted = true;
      f.information = fitted->information;
      f.lack_of_fit = fitted->lack_of_fit;
      f.on_bound = fitted->on_bound;
      if (law != "dense") {
        a->kappa = fitted->fit.params.at("kappa");
        const auto interval = fitted->intervals.find("kappa");
        if (interval != fitted->intervals.end()) a->kappa_interval = interval->second;
        context_law = std::move(*fitted);
      }
    }
    a->dense_forms.push_back(f);
  }
  return context_law;
}

// Each X-MoD form fitted to `points` (into a->forms and `fits`, which must not
// reallocate: reserved by the caller); the one with the lowest information
// criterion, which gives the advice, or null when none could be fitted.
absl::StatusOr<const LawReport*> FitXmodForms(const std::vector<LawPoint>& points,
                                              const AdviseOptions& o, Advice* a,
                                              std::vector<LawReport>* fits) {
  const LawReport* primary = nullptr;
  for (const std::string& form : o.forms) {
    FormAdvice f;
    f.law = form;
    if (FindLaw(form) == nullptr) return absl::InvalidArgumentError(UnknownLaw(form));
    absl::StatusOr<LawReport> fitted = FitForAdvice(form, points, o, o.bootstrap);
    if (!fitted.ok()) {
      f.error = std::string(fitted.status().message());
      a->forms.push_back(f);
      continue;
    }
    f.fitted = true;
    f.information = fitted->information;
    f.params = fitted->fit.params;
    f.lack_of_fit = fitted->lack_of_fit;
    f.on_bound = fitted->on_bound;
    fits->push_back(std::move(*fitted));
    a->forms.push_back(f);
  }
  for (const LawReport& fit : *fits) {
    if (primary == nullptr || fit.information.aic < primary->information.aic) primary = &fit;
  }
  if (primary == nullptr) {
    a->notes.push_back("no X-MoD form could be fitted: X-MoD configurations are not ranked");
  }
  return primary;
}

// Each fitted X-MoD form's own pick at C (into a->forms), and whether the forms
// pick different configurations; `ranking_for(form)` ranks under that form.
void FormPicks(const std::vector<LawReport>& fits, const LawReport* primary,
               const std::function<Ranking(const LawReport*)>& ranking_for, const AdviseOptions& o,
               Advice* a) {
  std::set<std::string> picks;
  for (FormAdvice& f : a->forms) {
    if (!f.fitted) continue;
    const LawReport* form = nullptr;
    for (const LawReport& fit : fits) {
      if (fit.law == f.law) form = &fit;
    }
    const Ranked ranked = form == primary ? Ranked{a->rows, a->refits} : Rank(ranking_for(form), o);
    const auto best =
        std::min_element(ranked.rows.begin(), ranked.rows.end(),
                         [](const auto& x, const auto& y) { return x.loss < y.loss; });
    if (best == ranked.rows.end()) continue;
    f.best = best->configuration.name;
    f.p_best = best->p_best;
    picks.insert(f.best);
  }
  a->answer_changes = picks.size() > 1;
}

// The law of `family` (named as the family) fitted to `points` into `fits`, when
// the family has runs; a law that cannot be fitted leaves its configurations
// unranked, with a note saying why.
const LawReport* FitFamilyLaw(const std::set<std::string>& families, const std::string& family,
                              const std::vector<LawPoint>& points, const AdviseOptions& o,
                              Advice* a, std::vector<LawReport>* fits) {
  if (families.count(family) == 0) return nullptr;
  absl::StatusOr<LawReport> fitted = FitForAdvice(family, points, o, o.bootstrap);
  if (!fitted.ok()) {
    a->notes.push_back(absl::StrCat(family, " law not fitted (", family,
                                    " configurations not ranked): ", fitted.status().message()));
    return nullptr;
  }
  fits->push_back(std::move(*fitted));
  return &fits->back();
}

// The laws behind the table (the X-MoD form used, not the others) with
// parameters on a bound, into a->unidentified.
void Unidentified(const std::vector<LawReport>& fits, const LawReport* primary,
                  const AdviseOptions& o, Advice* a) {
  for (const LawReport& fit : fits) {
    const bool other_form =
        &fit != primary && std::find(o.forms.begin(), o.forms.end(), fit.law) != o.forms.end();
    if (other_form || fit.on_bound.empty()) continue;
    a->unidentified.push_back(absl::StrCat(fit.law, ": ", absl::StrJoin(fit.on_bound, ", ")));
  }
}

}  // namespace

absl::StatusOr<Advice> Advise(const std::vector<LawPoint>& all, const AdviseOptions& o) {
  Advice a;
  a.options = o;
  RETURN_IF_ERROR(CheckOptions(o));
  std::vector<LawPoint> points;
  for (const LawPoint& x : all) {
    if (x.Valid()) points.push_back(x);
  }
  const std::vector<Configuration> configurations = Configurations(points);
  std::set<std::string> families;
  for (const Configuration& c : configurations) families.insert(c.family);
  const bool any_xmod = families.count("xmod") > 0;
  if (families.count("dense") == 0) {
    return absl::InvalidArgumentError(
        "no dense runs: every configuration is judged against the FLOP-matched dense model");
  }
  ASSIGN_OR_RETURN(const Search search, Support(points, o, &a));
  a.context_from_law =
      std::find(a.contexts.begin(), a.contexts.end(), o.context) == a.contexts.end();

  // The dense reference's two forms, when the runs span two or more contexts: the
  // one with a context term answers a context the sweep did not run.
  ASSIGN_OR_RETURN(std::optional<LawReport> context_law, FitDenseForms(points, o, &a));

  // The laws: each X-MoD form, the MoE law, or the dense law alone.
  std::vector<LawReport> fits;
  fits.reserve(o.forms.size() + 4);
  const LawReport* primary = nullptr;
  if (any_xmod) {
    ASSIGN_OR_RETURN(primary, FitXmodForms(points, o, &a, &fits));
  }
  const LawReport* moe = FitFamilyLaw(families, "moe", points, o, &a, &fits);
  const LawReport* mol = FitFamilyLaw(families, "mol", points, o, &a, &fits);
  const LawReport* gdn = FitFamilyLaw(families, "gdn", points, o, &a, &fits);
  const LawReport* dense_law = primary != nullptr ? primary
                               : moe != nullptr   ? moe
                               : mol != nullptr   ? mol
                                                  : gdn;
  if (dense_law == nullptr) {
    ASSIGN_OR_RETURN(LawReport fitted, FitForAdvice("dense", points, o, o.bootstrap));
    fits.push_back(std::move(fitted));
    dense_law = &fits.back();
  }
  ASSIGN_OR_RETURN(const auto own, OwnSearches(configurations, search, o, &a));
  const LawReport* context_by = a.context_from_law ? &*context_law : nullptr;
  // The law that predicts each family under `form` (the other families' laws
  // unchanged).
  auto law_for = [&](const LawReport* form, const std::string& family) -> const LawReport* {
    return family == "dense"  ? (form != nullptr ? form : dense_law)
           : family == "xmod" ? form
           : family == "mol"  ? mol
           : family == "gdn"  ? gdn
                              : moe;
  };
  for (const std::string& family : families) {
    const LawReport* law = law_for(primary, family);
    if (law != nullptr) a.models[family] = Model(*law, -1, context_by, o.context);
  }
  // The ranking under each form.
  auto ranking_for = [&](const LawReport* form) {
    Ranking r;
    r.context_law = context_by;
    for (const Configuration& c : configurations) {
      const LawReport* law = law_for(form, c.family);
      const auto searched = own.find(c.name);
      if (law == nullptr || searched == own.end()) continue;
      r.configurations.push_back(&c);
      r.laws.push_back(law);
      r.searches.push_back(searched->second.first);
      r.outside.push_back(searched->second.second);
    }
    return r;
  };
  Ranked main = Rank(ranking_for(primary), o);
  a.rows = std::move(main.rows);
  a.refits = main.refits;
  std::stable_sort(a.rows.begin(), a.rows.end(),
                   [](const auto& x, const auto& y) { return x.loss < y.loss; });
  if (primary != nullptr) a.form = primary->law;
  for (const LawReport& fit : fits) a.laws.push_back(fit.law);
  FormPicks(fits, primary, ranking_for, o, &a);
  Unidentified(fits, primary, o, &a);
  CompareForms(&a);
  SupportNotes(&a);
  if (o.holdout) {
    advise_parts::HoldOut(points, moe != nullptr ? "moe" : "", o, &a);
  } else {
    a.holdout.why = "not asked for";
  }
  Verdict(&a);
  return a;
}

}  // namespace xmod
