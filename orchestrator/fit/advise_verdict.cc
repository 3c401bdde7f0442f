// `xmod advise`'s verdict (advise_parts.h): the forms compared on their
// (quasi-)AIC, and the one-paragraph verdict a person reads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/advise_parts.h"

namespace xmod::advise_parts {

std::string Sci(double v) { return absl::StrFormat("%.3g", v); }

std::string Percent(double v) { return absl::StrFormat("%.2f%%", 100.0 * v); }

namespace {

// The decision hold-out's verdict in one clause (when it does not hold).
std::string HoldoutVerdict(const DecisionHoldout& h) {
  std::string what =
      absl::StrFormat("at scale %s the fit without it chose %s, %s was best observed", h.scale,
                      h.chosen, h.observed_best);
  if (h.chosen != h.observed_best) absl::StrAppend(&what, " (", Percent(h.regret), " better)");
  if (h.pick_ran && h.pick != h.observed_best) {
    absl::StrAppend(&what, "; the advised ", h.pick, " was observed ", Percent(h.pick_regret),
                    " worse than it there");
  }
  if (h.fails)
    return absl::StrCat("the decision hold-out FAILS: ", what, ", beyond the seed noise");
  return absl::StrCat("the decision hold-out cannot tell: ", what,
                      h.noise > 0 ? ", within two seed-noise sds"
                                  : ", with no replicates there to measure the noise");
}

}  // namespace

void Verdict(Advice* a) {
  if (a->rows.empty()) return;
  const ConfigurationAdvice& top = a->rows.front();
  std::vector<std::string> parts;
  const ConfigurationAdvice* dense = nullptr;
  for (const ConfigurationAdvice& r : a->rows) {
    if (r.configuration.family == "dense") dense = &r;
  }
  const double dense_loss = dense != nullptr ? dense->loss : 0.0;
  std::vector<std::string> better, worse;
  for (const ConfigurationAdvice& r : a->rows) {
    if (r.configuration.family == "dense" || a->refits == 0) continue;
    if (r.gain_interval.low > 0) better.push_back(r.configuration.name);
    if (r.gain_interval.high < 0) worse.push_back(r.configuration.name);
  }
  if (a->refits == 0) {
    parts.push_back(absl::StrCat("lowest predicted loss: ", top.configuration.name,
                                 " (no refits: no uncertainty, no decision)"));
  } else if (top.configuration.family == "dense") {
    parts.push_back(absl::StrFormat(
        "train dense: it has the lowest predicted loss (P(best) = %.2f)", top.p_best));
  } else if (top.gain_interval.low > 0) {
    parts.push_back(absl::StrFormat(
        "train %s: predicted %.4g nats (%s) below the FLOP-matched dense model, %.0f%% "
        "interval [%.4g, %.4g]; P(best) = %.2f",
        top.configuration.name, top.gain, Percent(dense_loss > 0 ? top.gain / dense_loss : 0.0),
        100.0 * a->options.confidence, top.gain_interval.low, top.gain_interval.high, top.p_best));
  } else {
    parts.push_back(absl::StrFormat(
        "no configuration is distinguishable from dense at this budget: the best, %s, gains "
        "%.4g nats with a %.0f%% interval [%.4g, %.4g] that holds 0 (P(best) = %.2f)",
        top.configuration.name, top.gain, 100.0 * a->options.confidence, top.gain_interval.low,
        top.gain_interval.high, top.p_best));
  }
  if (a->refits > 0 && top.p_best < 0.5) {
    parts.push_back("the ranking is uncertain: no configuration is best in half the refits");
  }
  if (!better.empty()) {
    parts.push_back(
        absl::StrCat("better than dense with confidence: ", absl::StrJoin(better, ", ")));
  }
  if (!worse.empty()) {
    parts.push_back(absl::StrCat("worse than dense with confidence: ", absl::StrJoin(worse, ", ")));
  }
  for (const FormAdvice& f : a->forms) {
    if (f.law == a->form && f.lack_of_fit.rejected) {
      a->uncalibrated = true;
      parts.push_back(absl::StrFormat(
          "law %s is REJECTED by its replicates (lack of fit p = %.2g, misfit %.2g%% of the loss "
          "against a seed noise of %.2g%%): read the table as a smoothing of the runs, not as a "
          "law; its P(best) and intervals assume the form holds and are NOT calibrated",
          f.law, f.lack_of_fit.p_value, 100.0 * f.lack_of_fit.misfit_rms,
          100.0 * f.lack_of_fit.noise_rms));
    }
  }
  if (!a->unidentified.empty()) {
    parts.push_back(absl::StrCat(
        "NOT IDENTIFIED by these runs: parameters on a bound (",
        absl::StrJoin(a->unidentified, "; "),
        "): the runs do not pin these parameters down, so read the configurations' intervals, "
        "not their point predictions, and add longer runs, seeds or scales to read the law"));
  }
  if (a->answer_changes) {
    parts.push_back(a->forms_indistinguishable
                        ? "the competing X-MoD forms fit equally well and pick different "
                          "configurations: the decision rests on the form, not the data"
                        : "the competing X-MoD forms pick different configurations");
  }
  if (!a->holdout.available) {
    parts.push_back("no decision hold-out (" + a->holdout.why + ")");
  } else if (!a->holdout.holds) {
    parts.push_back(HoldoutVerdict(a->holdout));
  }
  if (!a->left_out.empty()) {
    std::vector<std::string> names;
    for (const std::string& l : a->left_out) names.push_back(l.substr(0, l.find(" (")));
    parts.push_back(
        absl::StrCat("not ranked (outside their own runs): ", absl::StrJoin(names, ", ")));
  }
  bool marked = false;
  for (const ConfigurationAdvice& r : a->rows) marked |= !r.extrapolation.empty();
  if (!a->extrapolation.empty() || marked) parts.push_back("EXTRAPOLATED");
  a->verdict = absl::StrJoin(parts, "; ");
}

// The forms' quasi-AIC and whether the data can tell them apart. When every
// tested form is rejected by its replicates, the residual variance is inflated by
// about ĉ = F, and an AIC difference read against the seed noise overstates the
// evidence by that factor: the criterion is divided by ĉ (the smallest F, the
// least inflated form), as quasi-likelihood model selection does.
void CompareForms(Advice* a) {
  std::vector<FormAdvice*> fitted;
  bool all_rejected = true;
  double smallest_f = std::numeric_limits<double>::infinity();
  for (FormAdvice& f : a->forms) {
    if (!f.fitted || !f.information.available) continue;
    fitted.push_back(&f);
    all_rejected = all_rejected && f.lack_of_fit.available && f.lack_of_fit.rejected;
    if (f.lack_of_fit.available) smallest_f = std::min(smallest_f, f.lack_of_fit.f);
  }
  a->c_hat = all_rejected && !fitted.empty() && std::isfinite(smallest_f)
                 ? std::max(1.0, smallest_f)
                 : 1.0;
  for (FormAdvice* f : fitted) {
    const double penalty = 2.0 * f->information.parameters;
    f->qaic = (f->information.aic - penalty) / a->c_hat + penalty;
  }
  if (fitted.size() < 2) return;
  std::sort(fitted.begin(), fitted.end(),
            [](const FormAdvice* x, const FormAdvice* y) { return x->qaic < y->qaic; });
  a->delta_ic = fitted[1]->qaic - fitted[0]->qaic;
  a->forms_indistinguishable = a->delta_ic < kIndistinguishable;
  if (!a->forms_indistinguishable) return;
  const std::string criterion =
      a->c_hat > 1.0
          ? absl::StrCat("quasi-AIC (the AIC's fit term divided by c-hat = ", Sci(a->c_hat),
                         ", the smallest lack-of-fit F, as every form is rejected)")
          : std::string("AIC");
  a->notes.push_back(absl::StrFormat(
      "the X-MoD forms are indistinguishable: their %s differs by %.2g (below %g), so the data "
      "support %s as well as %s",
      criterion, a->delta_ic, kIndistinguishable, fitted[1]->law, fitted[0]->law));
}

}  // namespace xmod::advise_parts
