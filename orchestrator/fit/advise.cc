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
#include "orchestrator/fit/dense_context_law.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/fit/stages.h"

namespace xmod {

namespace advise_parts {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

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

using advise_parts::ConfigurationName;
using advise_parts::FitForAdvice;
using advise_parts::Median;
using advise_parts::PredictOr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kGrid = 97;  // N_active values searched per configuration (log-spaced)

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::vector<Configuration> Configurations(const std::vector<LawPoint>& points) {
  std::map<std::string, Configuration> by_name;
  std::map<std::string, std::vector<double>> ratios;
  for (const LawPoint& x : points) {
    const std::string name = ConfigurationName(x);
    Configuration& c = by_name[name];
    if (c.runs == 0) {
      c.name = name;
      c.family = x.dense()                 ? "dense"
                 : x.block_expansion > 0.0 ? "mol"
                 : x.deltanet_share > 0.0  ? "gdn"
                 : x.expansion > 1.0       ? "moe"
                                           : "xmod";
      if (!x.dense()) {
        c.capacity = x.capacity;
        c.stride = x.stride;
        c.expansion = x.expansion;
        c.block_expansion = x.block_expansion;
        c.deltanet_share = x.deltanet_share;
      }
    }
    const double compute = 6.0 * x.n * x.d, tpp = x.d / x.n;
    if (c.runs == 0) {
      c.compute_min = c.compute_max = compute;
      c.n_min = c.n_max = x.n;
      c.tpp_min = c.tpp_max = tpp;
    }
    c.compute_min = std::min(c.compute_min, compute);
    c.compute_max = std::max(c.compute_max, compute);
    c.n_min = std::min(c.n_min, x.n);
    c.n_max = std::max(c.n_max, x.n);
    c.tpp_min = std::min(c.tpp_min, tpp);
    c.tpp_max = std::max(c.tpp_max, tpp);
    ++c.runs;
    ratios[name].push_back(x.NTotal() / x.n);
    if (x.layers > 0) c.layers.emplace_back(x.n, x.layers);
  }
  std::vector<Configuration> out;
  for (auto& [name, c] : by_name) {
    c.total_ratio = c.family == "dense" ? 1.0 : Median(ratios[name]);
    out.push_back(std::move(c));
  }
  // dense first, then by name
  std::stable_sort(out.begin(), out.end(), [](const Configuration& a, const Configuration& b) {
    return (a.family == "dense") > (b.family == "dense");
  });
  return out;
}

// A fitted law reduced to what prediction needs; one per refit (`b`, or -1 for
// the full fit). `context_law` (the dense-context law, or null) supplies the dense
// reference at `context` when the law has none there (a context the sweep did not
// run).
LawReport Model(const LawReport& full, int b, const LawReport* context_law, double context) {
  LawReport m;
  m.law = full.law;
  m.method = full.method;
  const BootstrapRefit* refit = b >= 0 ? &full.refits[b] : nullptr;
  m.fit.raw = refit != nullptr ? refit->raw : full.fit.raw;
  bool at_context = false;
  for (const ContextFit& c : full.dense) {
    ContextFit d;
    d.context = c.context;
    d.fit.raw = c.fit.raw;
    if (refit != nullptr) {
      for (const auto& [t, raw] : refit->dense_raw) {
        if (t == c.context) d.fit.raw = raw;
      }
    }
    at_context |= c.context == context;
    m.dense.push_back(std::move(d));
  }
  if (!at_context && context_law != nullptr && !full.dense.empty()) {
    ContextFit d;
    d.context = context;
    d.fit.raw = DenseContextLaw::DenseAt(b >= 0 ? context_law->refits[b].raw : context_law->fit.raw,
                                         context);
    m.dense.push_back(std::move(d));
  }
  return m;
}

// The N_active range searched at C.
struct Search {
  double lo = 0.0;
  double hi = 0.0;
};

struct Best {
  double loss = kInf;
  double n = 0.0;
  bool edge = false;
};

// The lowest loss of `c` under `loss_at` (a callable on a LawPoint) at compute C
// over the search.
template <typename LossAt>
Best OptimiseBy(const LossAt& loss_at, const Configuration& c, const Search& s, double compute,
                double context) {
  Best best;
  const int steps = s.hi > s.lo ? kGrid : 1;
  for (int i = 0; i < steps; ++i) {
    const double n =
        steps == 1 ? s.lo
                   : std::exp(std::log(s.lo) + (std::log(s.hi) - std::log(s.lo)) * i / (steps - 1));
    const double loss = loss_at(c.At(n, compute / (6.0 * n), context));
    if (loss < best.loss) {
      best = {loss, n, steps > 1 && (i == 0 || i == steps - 1)};
    }
  }
  return best;
}

// The lowest predicted loss of `c` under `model` at compute C over the search.
Best Optimise(const LawReport& model, const Configuration& c, const Search& s, double compute,
              double context) {
  return OptimiseBy([&](const LawPoint& x) { return PredictOr(model, x); }, c, s, compute, context);
}

// The laws behind a ranking: which fitted law predicts each configuration.
struct Ranking {
  std::vector<const Configuration*> configurations;
  std::vector<const LawReport*> laws;      // per configuration
  std::vector<Search> searches;            // per configuration: N_active searched at C
  std::vector<std::string> outside;        // per configuration: how far outside its runs
  const LawReport* context_law = nullptr;  // the dense reference at an unrun context
};

struct Ranked {
  std::vector<ConfigurationAdvice> rows;  // in configuration order
  int refits = 0;
};

// Each configuration's loss at C under its law's full fit and under each refit
// (refit b of every law draws the dense runs alike: common resamples), the gains
// over dense under the same law and refit, and the share of refits in which each
// is lowest.
Ranked Rank(const Ranking& ranking, const AdviseOptions& o) {
  Ranked out;
  const size_t n = ranking.configurations.size();
  size_t refits = std::numeric_limits<size_t>::max();
  for (const LawReport* law : ranking.laws) refits = std::min(refits, law->refits.size());
  if (ranking.context_law != nullptr) {
    refits = std::min(refits, ranking.context_law->refits.size());
  }
  out.refits = static_cast<int>(refits);
  const Configuration* dense = nullptr;
  Search dense_search;
  for (size_t i = 0; i < n; ++i) {
    if (ranking.configurations[i]->family != "dense") continue;
    dense = ranking.configurations[i];
    dense_search = ranking.searches[i];
  }
  // Per law: its own dense loss at C (gains are read within one law).
  auto dense_loss = [&](const LawReport& model) {
    return dense != nullptr ? Optimise(model, *dense, dense_search, o.compute, o.context).loss
                            : kInf;
  };
  std::map<const LawReport*, LawReport> full_models;
  for (const LawReport* law : ranking.laws) {
    full_models.emplace(law, Model(*law, -1, ranking.context_law, o.context));
  }
  std::map<const LawReport*, double> full_dense;
  for (auto& [law, model] : full_models) full_dense[law] = dense_loss(model);
  for (size_t i = 0; i < n; ++i) {
    ConfigurationAdvice a;
    a.configuration = *ranking.configurations[i];
    a.law = ranking.laws[i]->law;
    a.extrapolation = ranking.outside[i];
    const Best best = Optimise(full_models.at(ranking.laws[i]), a.configuration,
                               ranking.searches[i], o.compute, o.context);
    a.loss = best.loss;
    a.n_active = best.n;
    a.tokens = best.n > 0 ? o.compute / (6.0 * best.n) : 0.0;
    a.at_edge = best.edge;
    a.gain = full_dense[ranking.laws[i]] - best.loss;
    out.rows.push_back(std::move(a));
  }
  std::vector<std::vector<double>> losses(n), gains(n);
  std::vector<int> wins(n, 0);
  for (size_t b = 0; b < refits; ++b) {
    std::map<const LawReport*, LawReport> models;
    std::map<const LawReport*, double> dense_at;
    for (const LawReport* law : ranking.laws) {
      if (models.count(law) > 0) continue;
      models.emplace(law, Model(*law, static_cast<int>(b), ranking.context_law, o.context));
      dense_at[law] = dense_loss(models.at(law));
    }
    size_t winner = n;
    double lowest = kInf;
    for (size_t i = 0; i < n; ++i) {
      const double loss = Optimise(models.at(ranking.laws[i]), out.rows[i].configuration,
                                   ranking.searches[i], o.compute, o.context)
                              .loss;
      losses[i].push_back(loss);
      gains[i].push_back(dense_at[ranking.laws[i]] - loss);
      if (loss < lowest) {
        lowest = loss;
        winner = i;
      }
    }
    if (winner < n) ++wins[winner];
  }
  int counted = 0;
  for (int w : wins) counted += w;
  const double tail = (1.0 - o.confidence) / 2.0;
  for (size_t i = 0; i < n; ++i) {
    ConfigurationAdvice& a = out.rows[i];
    a.p_best = counted > 0 ? static_cast<double>(wins[i]) / counted : 0.0;
    if (!losses[i].empty()) {
      a.loss_interval = {Quantile(losses[i], tail), Quantile(losses[i], 1.0 - tail)};
      a.gain_interval = {Quantile(gains[i], tail), Quantile(gains[i], 1.0 - tail)};
    }
  }
  return out;
}

std::string Sci(double v) { return absl::StrFormat("%.3g", v); }

std::string Percent(double v) { return absl::StrFormat("%.2f%%", 100.0 * v); }

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
        "): the fit fills the table, but differences between configurations inside their "
        "intervals are noise, and runs that are longer, more seeds or more scales are needed to "
        "read the law"));
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

constexpr double kSlack = 1.0000001;  // a request this close to a range's end is inside

// The ranges a request is held to: every run's (the pooled support) or one
// configuration's own runs'.
struct Ranges {
  double compute_min, compute_max, n_min, n_max, tpp_min, tpp_max;
};

// How far the request lies outside `r`, a clause per range it leaves: C, and with
// --n-active that N_active and its tokens per parameter. `whose` names the runs:
// "the" for every run, "its" for a configuration's.
std::vector<std::string> Outside(const Ranges& r, const AdviseOptions& o,
                                 const std::string& whose) {
  const std::string runs = whose == "the" ? "the runs'" : whose + " runs'";
  std::vector<std::string> why;
  if (o.compute > r.compute_max * kSlack) {
    why.push_back(absl::StrFormat("C = %s FLOPs is %.3gx %s largest compute run (%s)",
                                  Sci(o.compute), o.compute / r.compute_max, whose,
                                  Sci(r.compute_max)));
  } else if (o.compute < r.compute_min / kSlack) {
    why.push_back(absl::StrFormat("C = %s FLOPs is %.3gx below %s smallest compute run (%s)",
                                  Sci(o.compute), r.compute_min / o.compute, whose,
                                  Sci(r.compute_min)));
  }
  if (o.n_active <= 0) return why;
  if (o.n_active > r.n_max * kSlack || o.n_active < r.n_min / kSlack) {
    why.push_back(absl::StrFormat("N_active = %s is outside %s [%s, %s]", Sci(o.n_active), runs,
                                  Sci(r.n_min), Sci(r.n_max)));
  }
  const double tpp = o.compute / (6.0 * o.n_active) / o.n_active;
  if (tpp > r.tpp_max * kSlack || tpp < r.tpp_min / kSlack) {
    why.push_back(
        absl::StrFormat("D / N_active = %.3g tokens per parameter is outside %s [%.3g, %.3g]", tpp,
                        runs, r.tpp_min, r.tpp_max));
  }
  return why;
}

// The runs' support (into `a`), the N_active range searched at C, and how far
// outside the support the request is (refused unless extrapolating).
absl::StatusOr<Search> Support(const std::vector<LawPoint>& points, const AdviseOptions& o,
                               Advice* out) {
  Advice& a = *out;
  std::set<double> contexts;
  a.n_min = a.compute_min = a.tpp_min = kInf;
  for (const LawPoint& x : points) {
    contexts.insert(x.context);
    a.n_min = std::min(a.n_min, x.n);
    a.n_max = std::max(a.n_max, x.n);
    a.tpp_min = std::min(a.tpp_min, x.d / x.n);
    a.tpp_max = std::max(a.tpp_max, x.d / x.n);
    a.compute_min = std::min(a.compute_min, 6.0 * x.n * x.d);
    a.compute_max = std::max(a.compute_max, 6.0 * x.n * x.d);
  }
  a.contexts.assign(contexts.begin(), contexts.end());
  std::vector<std::string> outside;
  if (contexts.count(o.context) == 0) {
    std::vector<std::string> ran;
    for (double t : a.contexts) ran.push_back(absl::StrFormat("%g", t));
    if (contexts.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--context ", absl::StrFormat("%g", o.context),
          ": the sweep ran T = ", absl::StrJoin(ran, ", "),
          " only; another context needs the dense law with a context term, which needs runs "
          "at two or more contexts (not even --extrapolate answers it): run the sweep at that "
          "context"));
    }
    const double near =
        *std::min_element(a.contexts.begin(), a.contexts.end(), [&](double x, double y) {
          return std::abs(std::log(x / o.context)) < std::abs(std::log(y / o.context));
        });
    outside.push_back(absl::StrFormat(
        "T = %g was not run (the sweep ran T = %s; nearest %g, %.3gx away): its dense "
        "reference comes from the dense-context law",
        o.context, absl::StrJoin(ran, ", "), near,
        o.context > near ? o.context / near : near / o.context));
  }
  // How far outside the support, refused unless extrapolating.
  const Ranges pooled{a.compute_min, a.compute_max, a.n_min, a.n_max, a.tpp_min, a.tpp_max};
  for (std::string& w : Outside(pooled, o, "the")) outside.push_back(std::move(w));
  Search search;
  if (o.n_active > 0) {
    search = {o.n_active, o.n_active};
  } else {
    // Tokens per parameter inside the runs' range; N_active inside theirs too
    // unless extrapolating.
    search.lo = std::sqrt(o.compute / (6.0 * a.tpp_max));
    search.hi = std::sqrt(o.compute / (6.0 * a.tpp_min));
    if (!o.extrapolate || outside.empty()) {
      search.lo = std::max(search.lo, a.n_min);
      search.hi = std::min(search.hi, a.n_max);
    }
    if (search.lo > search.hi * kSlack) {
      if (outside.empty()) {
        outside.push_back(absl::StrFormat(
            "at C = %s no N_active in the runs' [%s, %s] has tokens per parameter in theirs "
            "[%.3g, %.3g]",
            Sci(o.compute), Sci(a.n_min), Sci(a.n_max), a.tpp_min, a.tpp_max));
      }
      search = {std::sqrt(o.compute / (6.0 * a.tpp_max)), std::sqrt(o.compute / (6.0 * a.tpp_min))};
    }
  }
  if (!outside.empty()) {
    if (!o.extrapolate) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::StrJoin(outside, "; "),
          ": outside what the sweep supports; pass --extrapolate to predict there anyway"));
    }
    a.extrapolation = absl::StrJoin(outside, "; ");
  }

  return search;
}

// The N_active range searched for `c` at C inside its own runs' support, or none
// (`outside` then says how far outside them the request is).
std::optional<Search> OwnSearch(const Configuration& c, const AdviseOptions& o,
                                std::string* outside) {
  std::vector<std::string> why =
      Outside({c.compute_min, c.compute_max, c.n_min, c.n_max, c.tpp_min, c.tpp_max}, o, "its");
  Search s = {o.n_active, o.n_active};
  if (o.n_active <= 0) {
    s.lo = std::max(std::sqrt(o.compute / (6.0 * c.tpp_max)), c.n_min);
    s.hi = std::min(std::sqrt(o.compute / (6.0 * c.tpp_min)), c.n_max);
    if (s.lo > s.hi * kSlack && why.empty()) {
      why.push_back(absl::StrFormat(
          "no N_active in its runs' [%s, %s] has tokens per parameter in its [%.3g, %.3g]",
          Sci(c.n_min), Sci(c.n_max), c.tpp_min, c.tpp_max));
    }
  }
  if (why.empty()) return s;
  *outside = absl::StrJoin(why, "; ");
  return std::nullopt;
}

// Each configuration's search at C inside its own runs, by name, with how far
// outside them it is ("" inside). Outside, a configuration is left out (into
// a->left_out) unless extrapolating, when it is searched as the pooled support
// allows and marked; dense, the reference of every gain, is refused instead.
absl::StatusOr<std::map<std::string, std::pair<Search, std::string>>> OwnSearches(
    const std::vector<Configuration>& configurations, const Search& pooled, const AdviseOptions& o,
    Advice* a) {
  std::map<std::string, std::pair<Search, std::string>> own;
  for (const Configuration& c : configurations) {
    std::string outside;
    const std::optional<Search> s = OwnSearch(c, o, &outside);
    if (s) {
      own[c.name] = {*s, ""};
    } else if (o.extrapolate) {
      own[c.name] = {pooled, outside};
    } else if (c.family == "dense") {
      return absl::InvalidArgumentError(
          absl::StrCat("dense: ", outside,
                       ": outside the dense runs, against which every gain is read; "
                       "pass --extrapolate to predict there anyway"));
    } else {
      a->left_out.push_back(absl::StrCat(c.name, " (", outside, ")"));
    }
  }
  return own;
}

// Notes on each row's support: an optimum on the searched range's edge, a row
// ranked outside its own runs (--extrapolate) with its distances, and the rows
// left out.
void SupportNotes(Advice* a) {
  for (const ConfigurationAdvice& r : a->rows) {
    const Configuration& c = r.configuration;
    if (r.at_edge && a->options.n_active == 0) {
      a->notes.push_back(absl::StrCat(c.name,
                                      ": its best N_active sits on the edge of the searched range "
                                      "(the optimum may lie outside what the sweep ran)"));
    }
    if (r.extrapolation.empty()) continue;
    a->notes.push_back(absl::StrFormat(
        "EXTRAPOLATING %s beyond its own runs: %s; at its best N_active %s it trains %.3g tokens "
        "per parameter (its runs: N_active %s-%s, %.3g-%.3g tokens per parameter)",
        c.name, r.extrapolation, Sci(r.n_active), r.n_active > 0 ? r.tokens / r.n_active : 0.0,
        Sci(c.n_min), Sci(c.n_max), c.tpp_min, c.tpp_max));
  }
  if (!a->left_out.empty()) {
    a->notes.push_back(absl::StrCat(
        "not ranked, the request being outside their own runs (--extrapolate ranks them, "
        "marked): ",
        absl::StrJoin(a->left_out, "; ")));
  }
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

LawPoint Configuration::At(double n, double d, double context) const {
  LawPoint x;
  x.n = n;
  x.d = d;
  x.loss = 1.0;
  x.context = context;
  x.family = family;
  x.capacity = capacity;
  x.stride = stride;
  x.expansion = expansion;
  x.block_expansion = block_expansion;
  x.deltanet_share = deltanet_share;
  x.n_total = n * total_ratio;
  double nearest = kInf;
  for (const auto& [runs_n, l] : layers) {
    const double distance = std::abs(std::log(runs_n / n));
    if (distance < nearest) {
      nearest = distance;
      x.layers = l;
    }
  }
  return x;
}

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

namespace {

// The decision hold-out in AdviceJson.
nlohmann::json HoldoutJson(const DecisionHoldout& h) {
  nlohmann::json holdout = {{"available", h.available}};
  if (!h.available) {
    holdout["why"] = h.why;
  } else {
    nlohmann::json hr = nlohmann::json::array();
    for (const auto& r : h.rows) {
      hr.push_back({{"configuration", r.configuration},
                    {"runs", r.runs},
                    {"observed", r.observed},
                    {"observed_sd", r.observed_sd},
                    {"predicted", r.predicted}});
    }
    nlohmann::json compared = nlohmann::json::array();
    for (const auto& r : h.rows) compared.push_back(r.configuration);
    holdout.update(
        {{"scale", h.scale},
         {"compute", h.compute},
         {"tokens_per_param", h.tokens_per_param},
         {"dense_scales", h.dense_scales},
         {"compared", compared},
         {"verdict", h.verdict},
         {"pick", h.pick},
         {"pick_ran", h.pick_ran},
         {"pick_regret", h.pick_ran ? nlohmann::json(h.pick_regret) : nlohmann::json(nullptr)},
         {"fails", h.fails},
         {"rows", hr},
         {"chosen", h.chosen},
         {"observed_best", h.observed_best},
         {"agrees", h.agrees},
         {"regret", h.regret},
         {"noise", h.noise},
         {"holds", h.holds}});
  }
  return holdout;
}

}  // namespace

nlohmann::json AdviceJson(const Advice& a) {
  auto interval = [](const Interval& i) { return nlohmann::json::array({i.low, i.high}); };
  nlohmann::json rows = nlohmann::json::array();
  for (const ConfigurationAdvice& r : a.rows) {
    const Configuration& c = r.configuration;
    rows.push_back({{"configuration", c.name},
                    {"family", c.family},
                    {"law", r.law},
                    {"sparsity", 1.0 - c.capacity},
                    {"capacity", c.capacity},
                    {"stride", c.stride},
                    {"expansion", c.expansion},
                    {"block_expansion", c.block_expansion},
                    {"deltanet_share", c.deltanet_share},
                    {"N_active", r.n_active},
                    {"N_total", r.n_active * c.total_ratio},
                    {"D", r.tokens},
                    {"loss", r.loss},
                    {"loss_interval", interval(r.loss_interval)},
                    {"gain_vs_dense", r.gain},
                    {"gain_interval", interval(r.gain_interval)},
                    {"p_best", r.p_best},
                    {"at_edge", r.at_edge},
                    {"extrapolation", r.extrapolation.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(r.extrapolation)},
                    {"support",
                     {{"compute", {c.compute_min, c.compute_max}},
                      {"N_active", {c.n_min, c.n_max}},
                      {"tokens_per_param", {c.tpp_min, c.tpp_max}}}},
                    {"runs", c.runs}});
  }
  auto form_json = [](const FormAdvice& f) {
    nlohmann::json j = {{"law", f.law}, {"fitted", f.fitted}};
    if (!f.fitted) {
      j["error"] = f.error;
    } else {
      j["aic"] = f.information.aic;
      j["qaic"] = f.qaic;
      j["parameters"] = f.information.parameters;
      j["noise"] = f.information.noise;
      j["lack_of_fit"] = LackOfFitJson(f.lack_of_fit);
      j["on_bound"] = f.on_bound;
      j["holdout_rmse"] = f.holdout_rmse >= 0 ? nlohmann::json(f.holdout_rmse) : nullptr;
      j["holdout_points"] = f.holdout_points;
      j["holdout_choice"] = f.holdout_choice;
      j["best"] = f.best;
      j["p_best"] = f.p_best;
    }
    return j;
  };
  nlohmann::json forms = nlohmann::json::array();
  for (const FormAdvice& f : a.forms) forms.push_back(form_json(f));
  nlohmann::json dense_forms = nlohmann::json::array();
  for (const FormAdvice& f : a.dense_forms) dense_forms.push_back(form_json(f));
  const nlohmann::json holdout = HoldoutJson(a.holdout);
  return {{"fixed", a.options.fixed},
          {"compute", a.options.compute},
          {"context", a.options.context},
          {"n_active", a.options.n_active > 0 ? nlohmann::json(a.options.n_active) : nullptr},
          {"confidence", a.options.confidence},
          {"form", a.form},
          {"laws", a.laws},
          {"refits", a.refits},
          {"configurations", rows},
          {"forms", forms},
          {"dense_forms", dense_forms},
          {"kappa", a.dense_forms.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.kappa)},
          {"kappa_interval", interval(a.kappa_interval)},
          {"context_from_law", a.context_from_law},
          {"answer_changes_between_forms", a.answer_changes},
          {"c_hat", a.c_hat},
          {"delta_ic", a.delta_ic},
          {"forms_indistinguishable", a.forms_indistinguishable},
          {"support",
           {{"compute", {a.compute_min, a.compute_max}},
            {"N_active", {a.n_min, a.n_max}},
            {"tokens_per_param", {a.tpp_min, a.tpp_max}},
            {"contexts", a.contexts}}},
          {"extrapolation",
           a.extrapolation.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.extrapolation)},
          {"decision_holdout", holdout},
          {"left_out", a.left_out},
          {"uncalibrated", a.uncalibrated},
          {"unidentified", a.unidentified},
          {"notes", a.notes},
          {"verdict", a.verdict}};
}

}  // namespace xmod

namespace xmod {

absl::StatusOr<std::map<std::string, double>> OptimalLosses(const LossFunction& loss,
                                                            const std::vector<LawPoint>& points,
                                                            const AdviseOptions& o) {
  Advice a;
  ASSIGN_OR_RETURN(const Search search, Support(points, o, &a));
  const std::vector<Configuration> configurations = Configurations(points);
  ASSIGN_OR_RETURN(const auto own, OwnSearches(configurations, search, o, &a));
  std::map<std::string, double> out;
  for (const Configuration& c : configurations) {
    const auto searched = own.find(c.name);
    if (searched == own.end()) continue;
    out[c.name] = OptimiseBy(loss, c, searched->second.first, o.compute, o.context).loss;
  }
  return out;
}

double FittedLoss(const Advice& advice, const LawPoint& x) {
  const auto model = advice.models.find(x.family);
  return model == advice.models.end() ? kInf : PredictOr(model->second, x);
}

double DefaultCompute(const std::vector<LawPoint>& points) {
  double compute = 0.0;
  for (const Configuration& c : Configurations(points)) {
    compute = compute == 0.0 ? c.compute_max : std::min(compute, c.compute_max);
  }
  return compute;
}

std::vector<Configuration> SweepConfigurations(const std::vector<LawPoint>& points) {
  return Configurations(points);
}

LawReport RefitModel(const LawReport& full, int refit) { return Model(full, refit, nullptr, 0.0); }

}  // namespace xmod
