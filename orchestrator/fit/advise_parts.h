// Pieces of `xmod advise` (advise.h) shared by its files: advise.cc fits the laws
// and makes the advice, advise_support.cc holds each request to the runs,
// advise_rank.cc ranks the configurations over the refits, advise_verdict.cc
// writes the verdict, advise_json.cc the JSON, decision_holdout.cc re-makes the
// decision without the largest decisive scale. Not for use outside them.
#ifndef XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_
#define XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/stats.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law.h"

namespace xmod::advise_parts {

// The configuration a point belongs to, by name ("" for a point no law ranks).
std::string ConfigurationName(const LawPoint& x);
// The loss `model` predicts at `x`, or +inf where it gives none.
double PredictOr(const LawReport& model, const LawPoint& x);
// Fits `law` to `points` with the advice's settings and `bootstrap` refits.
absl::StatusOr<LawReport> FitForAdvice(const std::string& law, const std::vector<LawPoint>& points,
                                       const AdviseOptions& o, int bootstrap);
// The RMSE of log-loss of `fitted` on the held-out points its law reads.
void HeldOutError(const LawReport& fitted, const std::vector<LawPoint>& held, FormAdvice* form);
// The decision hold-out (decision_holdout.cc) into advice->holdout, and each
// form's held-out error; `moe_law` names the MoE law when it was fitted ("" not).
void HoldOut(const std::vector<LawPoint>& points, const std::string& moe_law,
             const AdviseOptions& o, Advice* advice);

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kGrid = 97;  // N_active values searched per configuration (log-spaced)

// advise_support.cc: the configurations `points` hold (dense first).
std::vector<Configuration> Configurations(const std::vector<LawPoint>& points);

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

// advise_rank.cc: a fitted law reduced to what prediction needs; one per refit
// (`b`, or -1 for the full fit). `context_law` (the dense-context law, or null)
// supplies the dense reference at `context` when the law has none there.
LawReport Model(const LawReport& full, int b, const LawReport* context_law, double context);

// The lowest predicted loss of `c` under `model` at compute C over the search.
Best Optimise(const LawReport& model, const Configuration& c, const Search& s, double compute,
              double context);

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
Ranked Rank(const Ranking& ranking, const AdviseOptions& o);

// advise_support.cc: the runs' support (into `a`), the N_active range searched at
// C, and how far outside the support the request is (refused unless
// extrapolating).
absl::StatusOr<Search> Support(const std::vector<LawPoint>& points, const AdviseOptions& o,
                               Advice* a);
// Each configuration's search at C inside its own runs, by name, with how far
// outside them it is ("" inside); outside, left out into a->left_out unless
// extrapolating; dense outside is refused.
absl::StatusOr<std::map<std::string, std::pair<Search, std::string>>> OwnSearches(
    const std::vector<Configuration>& configurations, const Search& pooled, const AdviseOptions& o,
    Advice* a);
// Notes on each row's support: edges, rows ranked outside their own runs, rows
// left out.
void SupportNotes(Advice* a);

// advise_verdict.cc: numbers as the verdict prints them.
std::string Sci(double v);
std::string Percent(double v);
// The forms' quasi-AIC and whether the data can tell them apart (into a).
void CompareForms(Advice* a);
// The verdict paragraph (into a->verdict; a->uncalibrated).
void Verdict(Advice* a);

}  // namespace xmod::advise_parts

#endif  // XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_
