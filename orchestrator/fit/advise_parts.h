// Pieces of `xmod advise` (advise.h) shared by its files: advise.cc ranks the
// configurations, decision_holdout.cc re-makes the decision without the largest
// decisive scale. Not for use outside them.
#ifndef XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_
#define XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law.h"

namespace xmod::advise_parts {

double Median(std::vector<double> v);
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

}  // namespace xmod::advise_parts

#endif  // XMOD_ORCHESTRATOR_FIT_ADVISE_PARTS_H_
