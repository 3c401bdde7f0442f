// The decision hold-out of `xmod advise` (advise.h, DecisionHoldout; docs/laws.md,
// "The decision hold-out"): the laws refitted without the largest scale at which
// two or more configurations ran at one training compute, and the decision they
// make among every configuration run there compared with what was observed.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/stats.h"
#include "orchestrator/fit/advise_parts.h"

namespace xmod::advise_parts {

namespace {

constexpr double kSameCompute = 1.01;  // runs within 1% of a group's first are compute-matched
constexpr int kMinDenseScales = 3;     // what a dense law needs left to be fitted at all

// The scales of `points` by mean ln N_active, smallest first.
std::vector<std::pair<double, std::string>> ScalesBySize(const std::vector<LawPoint>& points,
                                                         const std::vector<std::string>& labels) {
  std::map<std::string, std::pair<double, int>> sums;
  for (size_t i = 0; i < points.size(); ++i) {
    sums[labels[i]].first += std::log(points[i].n);
    sums[labels[i]].second += 1;
  }
  std::vector<std::pair<double, std::string>> out;
  for (const auto& [label, s] : sums) out.emplace_back(s.first / s.second, label);
  std::sort(out.begin(), out.end());
  return out;
}

double Compute(const LawPoint& x) { return 6.0 * x.n * x.d; }

// The runs `at` grouped by training compute: sorted, each group the runs within 1%
// of its smallest.
std::vector<std::vector<size_t>> ComputeGroups(const std::vector<LawPoint>& points,
                                               std::vector<size_t> at) {
  std::sort(at.begin(), at.end(),
            [&](size_t a, size_t b) { return Compute(points[a]) < Compute(points[b]); });
  std::vector<std::vector<size_t>> groups;
  double first = 0.0;
  for (size_t i : at) {
    if (groups.empty() || Compute(points[i]) > first * kSameCompute) {
      groups.emplace_back();
      first = Compute(points[i]);
    }
    groups.back().push_back(i);
  }
  return groups;
}

// The held-out scale: the largest with a compute group of two or more ranked
// configurations (the group with the most of them).
struct Target {
  std::string scale;
  double size = 0.0;  // mean ln N_active
  std::vector<size_t> group;
};

std::optional<Target> DecisiveScale(const std::vector<LawPoint>& points,
                                    const std::vector<std::string>& labels,
                                    const std::vector<std::pair<double, std::string>>& scales,
                                    const std::set<std::string>& ranked) {
  for (auto it = scales.rbegin(); it != scales.rend(); ++it) {
    std::vector<size_t> at;
    for (size_t i = 0; i < points.size(); ++i) {
      if (labels[i] == it->second && ranked.count(ConfigurationName(points[i])) > 0) {
        at.push_back(i);
      }
    }
    Target t;
    size_t most = 1;
    for (const auto& g : ComputeGroups(points, at)) {
      std::set<std::string> names;
      for (size_t i : g) names.insert(ConfigurationName(points[i]));
      if (names.size() > most) {
        most = names.size();
        t = {it->second, it->first, g};
      }
    }
    if (!t.group.empty()) return t;
  }
  return std::nullopt;
}

// The fewest dense scales (distinct N of dense runs) at any context of `points`.
int DenseScales(const std::vector<LawPoint>& points) {
  std::map<double, std::set<double>> sizes;
  for (const LawPoint& x : points) {
    if (x.dense()) sizes[x.context].insert(x.n);
  }
  if (sizes.empty()) return 0;
  size_t fewest = sizes.begin()->second.size();
  for (const auto& [context, n] : sizes) fewest = std::min(fewest, n.size());
  return static_cast<int>(fewest);
}

// One row per configuration of `group`: its observed mean and seed sd, and the
// loss predicted by `fitted` (by `moe` for a MoE run; MoL and gdn runs are not part
// of the X-MoD decision).
std::vector<DecisionHoldout::Row> Compare(const std::vector<LawPoint>& points,
                                          const std::vector<size_t>& group, const LawReport& fitted,
                                          const LawReport* moe) {
  std::map<std::string, std::vector<double>> observed, predicted;
  for (size_t i : group) {
    const LawPoint& x = points[i];
    if (x.block_expansion > 0.0 || x.deltanet_share > 0.0) continue;
    const LawReport* law = x.expansion > 1.0 ? moe : &fitted;
    if (law == nullptr) continue;
    observed[ConfigurationName(x)].push_back(x.loss);
    predicted[ConfigurationName(x)].push_back(PredictOr(*law, x));
  }
  std::vector<DecisionHoldout::Row> rows;
  for (const auto& [name, seen] : observed) {
    DecisionHoldout::Row r;
    r.configuration = name;
    r.runs = static_cast<int>(seen.size());
    for (double v : seen) r.observed += v / seen.size();
    for (double v : seen) r.observed_sd += (v - r.observed) * (v - r.observed);
    r.observed_sd = seen.size() > 1 ? std::sqrt(r.observed_sd / (seen.size() - 1)) : 0.0;
    for (double v : predicted[name]) r.predicted += v / predicted[name].size();
    rows.push_back(r);
  }
  return rows;
}

// The pooled seed sd of the rows with two or more seeds (0: none has).
double PooledSd(const std::vector<DecisionHoldout::Row>& rows) {
  double pooled = 0.0;
  int df = 0;
  for (const auto& r : rows) {
    if (r.runs < 2) continue;
    pooled += (r.runs - 1) * r.observed_sd * r.observed_sd;
    df += r.runs - 1;
  }
  return df > 0 ? std::sqrt(pooled / df) : 0.0;
}

// The verdict on `h.rows` (DecisionHoldout's three) for the advice's pick `pick`:
// the refit's choice is held against the observed best, and so is the pick when
// it ran at that compute.
void Judge(const std::string& pick, DecisionHoldout* h) {
  const auto& rows = h->rows;
  const auto chosen = std::min_element(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.predicted < b.predicted;
  });
  const auto best = std::min_element(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.observed < b.observed;
  });
  const auto picked = std::find_if(rows.begin(), rows.end(),
                                   [&](const auto& r) { return r.configuration == pick; });
  h->chosen = chosen->configuration;
  h->observed_best = best->configuration;
  h->agrees = h->chosen == h->observed_best;
  h->regret = chosen->observed / best->observed - 1.0;
  const double sd = PooledSd(rows);
  h->noise = sd * std::sqrt(1.0 / chosen->runs + 1.0 / best->runs);
  const bool chosen_beaten =
      !h->agrees && h->noise > 0 && chosen->observed - best->observed > 2.0 * h->noise;
  h->pick = pick;
  h->pick_ran = picked != rows.end();
  bool pick_beaten = false, pick_lost = false;
  if (h->pick_ran) {
    h->pick_regret = picked->observed / best->observed - 1.0;
    const double noise = sd * std::sqrt(1.0 / picked->runs + 1.0 / best->runs);
    pick_lost = picked->configuration != h->observed_best;
    pick_beaten = pick_lost && noise > 0 && picked->observed - best->observed > 2.0 * noise;
  }
  h->holds = h->agrees && !pick_lost;
  h->fails = chosen_beaten || pick_beaten;
  h->verdict = h->holds ? "holds" : h->fails ? "FAILS" : "cannot tell";
}

// The refit of `law` on `fit_points` and, for the advice's form, the comparison.
void Refit(FormAdvice* form, bool decides, const std::string& pick,
           const std::vector<LawPoint>& points, const std::vector<LawPoint>& fit_points,
           const std::vector<LawPoint>& held, const Target& target, const LawReport* moe,
           const AdviseOptions& o, DecisionHoldout* h) {
  absl::StatusOr<LawReport> fitted = FitForAdvice(form->law, fit_points, o, 0);
  if (!fitted.ok()) {
    if (decides) {
      h->why = absl::StrCat("law ", form->law, " without scale ", h->scale,
                            " and larger: ", fitted.status().message());
    }
    return;
  }
  HeldOutError(*fitted, held, form);
  std::vector<DecisionHoldout::Row> rows = Compare(points, target.group, *fitted, moe);
  if (rows.size() < 2) return;
  DecisionHoldout judged = *h;
  judged.rows = std::move(rows);
  Judge(pick, &judged);
  form->holdout_choice = judged.chosen;
  if (!decides) return;
  judged.available = true;
  judged.why.clear();
  *h = std::move(judged);
}

}  // namespace

void HoldOut(const std::vector<LawPoint>& points, const std::string& moe_law,
             const AdviseOptions& o, Advice* advice) {
  DecisionHoldout& h = advice->holdout;
  std::set<std::string> ranked;
  for (const ConfigurationAdvice& r : advice->rows) ranked.insert(r.configuration.name);
  const std::string pick = advice->rows.empty() ? "" : advice->rows.front().configuration.name;
  std::string largest;
  const std::vector<std::string> labels = ScaleLabels(points, &largest);
  const auto scales = ScalesBySize(points, labels);
  const std::optional<Target> target = DecisiveScale(points, labels, scales, ranked);
  if (!target) {
    h.why = "no scale ran two or more ranked configurations at one training compute";
    return;
  }
  h.scale = target->scale;
  std::vector<LawPoint> fit_points, held;
  std::map<std::string, double> size_of;
  for (const auto& [size, label] : scales) size_of[label] = size;
  for (size_t i = 0; i < points.size(); ++i) {
    (size_of[labels[i]] < target->size ? fit_points : held).push_back(points[i]);
  }
  h.dense_scales = DenseScales(fit_points);
  if (h.dense_scales < kMinDenseScales) {
    h.why =
        absl::StrCat("without scale ", h.scale, " and larger the dense runs have ", h.dense_scales,
                     " scale", h.dense_scales == 1 ? "" : "s", " left; a refit needs at least ",
                     kMinDenseScales, ", so no hold-out is possible (run more scales)");
    return;
  }
  std::vector<double> compute, tpp;
  for (size_t i : target->group) {
    compute.push_back(Compute(points[i]));
    tpp.push_back(points[i].d / points[i].n);
  }
  h.compute = Median(compute);
  h.tokens_per_param = Median(tpp);
  std::optional<LawReport> moe;
  if (!moe_law.empty()) {
    absl::StatusOr<LawReport> fitted = FitForAdvice(moe_law, fit_points, o, 0);
    if (fitted.ok()) moe = std::move(*fitted);
  }
  for (FormAdvice& form : advice->forms) {
    if (!form.fitted) continue;
    const bool decides = form.law == advice->form || advice->form.empty();
    Refit(&form, decides, pick, points, fit_points, held, *target, moe ? &*moe : nullptr, o, &h);
  }
  // The dense reference's forms: held-out error only (they rank nothing).
  for (FormAdvice& form : advice->dense_forms) {
    if (!form.fitted) continue;
    absl::StatusOr<LawReport> fitted = FitForAdvice(form.law, fit_points, o, 0);
    if (fitted.ok()) HeldOutError(*fitted, held, &form);
  }
  if (!h.available && h.why.empty()) h.why = "no law could be refitted without that scale";
}

}  // namespace xmod::advise_parts
