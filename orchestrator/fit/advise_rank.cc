// `xmod advise`'s ranking (advise_parts.h): each configuration's predicted loss
// at C under its law's full fit and its refits, the intervals and P(best); and
// the searches that score a truth the same way (OptimalLosses).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/stats.h"
#include "common/status_macros.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/advise_parts.h"
#include "orchestrator/fit/dense_context_law.h"

namespace xmod {

namespace advise_parts {

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

// The lowest predicted loss of `c` under `model` at compute C over the search.
Best Optimise(const LawReport& model, const Configuration& c, const Search& s, double compute,
              double context) {
  return OptimiseBy([&](const LawPoint& x) { return PredictOr(model, x); }, c, s, compute, context);
}

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

}  // namespace advise_parts

using advise_parts::Configurations;
using advise_parts::kInf;
using advise_parts::Model;
using advise_parts::OptimiseBy;
using advise_parts::OwnSearches;
using advise_parts::PredictOr;
using advise_parts::Search;
using advise_parts::Support;

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

LawReport RefitModel(const LawReport& full, int refit) { return Model(full, refit, nullptr, 0.0); }

}  // namespace xmod
