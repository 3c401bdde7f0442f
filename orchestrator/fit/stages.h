// How a law is fitted to one point set: per context (a single-stage law such as
// the dense law), or in two stages against the dense law of each context (xmod,
// moe), optionally refined jointly. law_registry.h instantiates these for each law
// of its table; analysis.cc chooses the points, holds out, bootstraps and reports.
#ifndef XMOD_ORCHESTRATOR_FIT_STAGES_H_
#define XMOD_ORCHESTRATOR_FIT_STAGES_H_

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/fitter.h"

namespace xmod {

// A law's fit to one point set; `previous` (when given to the fitting functions)
// is the full-data fit: a bootstrap refit starts from its optima and from the
// thinned grid.
struct Fitted {
  std::vector<ContextFit> dense;  // the per-context fits (the dense reference of a two-stage law)
  FitResult extras;               // a two-stage law's second stage
  FitResult fit;
  std::string method;
};

// Frozen parameters (--fix) in internal units.
struct Fixed {
  std::vector<std::optional<double>> all;    // the law's parameters
  std::vector<std::optional<double>> dense;  // its dense-law prefix (kDenseParameters)
};

// The dense runs of `points` (dense = true) or the sparse ones.
std::vector<LawPoint> Runs(const std::vector<LawPoint>& points, bool dense);
// Distinct contexts of `points`, ascending.
std::vector<double> Contexts(const std::vector<LawPoint>& points);
// The fitter's setup: `fixed`, and with a `previous` fit its optima plus the
// thinned grid of axes [first, first + count) after `prefix`.
FitSetup Starts(const std::vector<std::optional<double>>& fixed, const FitResult* previous,
                const std::vector<std::vector<double>>& grid, size_t first, size_t count,
                const std::vector<double>& prefix);
// Reported parameters (`names`) of `raw` that sit on one of `bounds` (frozen ones excluded).
std::vector<std::string> OnBound(const std::vector<double>& raw,
                                 const std::vector<std::string>& names,
                                 const std::vector<std::pair<double, double>>& bounds,
                                 const std::vector<std::optional<double>>& fixed);
// The dense law's terms that vanished at every point ("E->0", ...).
std::vector<std::string> VanishedDenseTerms(const std::vector<double>& raw,
                                            const std::vector<LawPoint>& points,
                                            const std::vector<std::optional<double>>& fixed);
// Objective and RMSE of several fits together.
void Combine(const std::vector<const FitResult*>& parts, FitResult* into);
// The fit of `context` among `dense`, or null.
const ContextFit* AtContext(const std::vector<ContextFit>& dense, double context);
// `sparse`, each point carrying the dense law of its context as its reference.
absl::StatusOr<std::vector<LawPoint>> WithReferences(const std::vector<LawPoint>& sparse,
                                                     const std::vector<ContextFit>& dense,
                                                     const std::string& law);

// `Law` at each context of `points`, appended to out->dense; `fixed` holds its
// parameters, `what` prefixes an error.
template <typename Law>
absl::Status FitPerContext(const std::vector<LawPoint>& points,
                           const std::vector<std::optional<double>>& fixed,
                           const FitOptions& options, const Fitted* previous,
                           const std::string& what, Fitted* out) {
  const std::vector<double> contexts = Contexts(points);
  if (previous != nullptr && previous->dense.size() != contexts.size()) {
    return absl::InvalidArgumentError("a resample lost a context");
  }
  const bool dense = std::is_same_v<Law, DenseLaw>;
  for (size_t i = 0; i < contexts.size(); ++i) {
    std::vector<LawPoint> at;
    for (const LawPoint& x : points) {
      if (x.context == contexts[i]) at.push_back(x);
    }
    ContextFit c;
    c.context = contexts[i];
    absl::StatusOr<FitResult> r =
        FitLaw<Law>(at, options,
                    Starts(fixed, previous ? &previous->dense[i].fit : nullptr, Law::StartGrid(), 0,
                           Law::kParameters, {}));
    if (!r.ok()) {
      const std::string which = absl::StrCat(dense ? "dense" : Law::Name(), " law");
      return absl::Status(
          r.status().code(),
          absl::StrCat(
              what,
              contexts.size() > 1 || contexts[i] > 0 ? absl::StrCat(which, " at T = ", contexts[i])
                                                     : which,
              " (", at.size(), dense ? " dense runs): " : " runs): ", r.status().message()));
    }
    c.fit = *std::move(r);
    c.on_bound = OnBound(c.fit.raw, Law::ReportedNames(), Law::Bounds(), fixed);
    if (dense) {
      for (std::string& v : VanishedDenseTerms(c.fit.raw, at, fixed)) c.on_bound.push_back(v);
    }
    out->dense.push_back(std::move(c));
  }
  return absl::OkStatus();
}

// A single-stage law: fitted at each context of the points it reads.
template <typename Law>
absl::StatusOr<Fitted> FitSingleStage(const std::vector<LawPoint>& points, bool /*joint*/,
                                      const Fixed& fixed, const FitOptions& options,
                                      const Fitted* previous) {
  Fitted out;
  RETURN_IF_ERROR(FitPerContext<Law>(points, fixed.all, options, previous, "", &out));
  out.method = out.dense.size() > 1 ? "per-context" : "single";
  out.fit = out.dense[0].fit;
  std::vector<const FitResult*> parts;
  for (const ContextFit& c : out.dense) parts.push_back(&c.fit);
  Combine(parts, &out.fit);
  out.fit.starts = 0;
  for (const ContextFit& c : out.dense) out.fit.starts += c.fit.starts;
  out.fit.converged = std::all_of(out.dense.begin(), out.dense.end(),
                                  [](const ContextFit& c) { return c.fit.converged; });
  return out;
}

// A single-stage law with a context term: one fit over all its points, whatever
// their contexts (method "across-contexts"; no per-context fits).
template <typename Law>
absl::StatusOr<Fitted> FitAcrossContexts(const std::vector<LawPoint>& points, bool /*joint*/,
                                         const Fixed& fixed, const FitOptions& options,
                                         const Fitted* previous) {
  Fitted out;
  out.method = "across-contexts";
  absl::StatusOr<FitResult> r = FitLaw<Law>(points, options,
                                            Starts(fixed.all, previous ? &previous->fit : nullptr,
                                                   Law::StartGrid(), 0, Law::kParameters, {}));
  if (!r.ok()) {
    return absl::Status(r.status().code(), absl::StrCat(Law::Name(), " law (", points.size(),
                                                        " runs): ", r.status().message()));
  }
  out.fit = *std::move(r);
  return out;
}

// A law whose first five parameters are the dense law's (xmod, moe), fitted in two
// stages: the dense law at each context on the dense runs, then the law's extras on
// the other runs, each against the dense law of its context (frozen). With `joint`,
// all parameters are then refined together (one context only).
template <typename Law>
absl::StatusOr<Fitted> FitTwoStage(const std::vector<LawPoint>& points, bool joint,
                                   const Fixed& fixed, const FitOptions& options,
                                   const Fitted* previous) {
  constexpr int kP = Law::kParameters, kDense = Law::kDenseParameters;
  const std::string name = Law::Name();
  const std::vector<LawPoint> dense = Runs(points, true);
  const std::vector<LawPoint> sparse = Runs(points, false);
  Fitted out;
  out.method = joint ? "joint" : "two-stage";
  // Stage 1: the dense law at each context.
  if (dense.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " law, stage 1: no dense runs (the dense reference needs them",
                     Law::NoDenseHint(), ")"));
  }
  RETURN_IF_ERROR(FitPerContext<DenseLaw>(dense, fixed.dense, options, previous,
                                          absl::StrCat(name, " law, stage 1, "), &out));
  if (joint && out.dense.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--joint: the dense reference is fitted per context and these runs span ", out.dense.size(),
        " contexts; a joint fit shares one dense law (select one with --context T)"));
  }
  // Stage 2: the extras on the sparse runs, each against its context's dense law.
  absl::StatusOr<std::vector<LawPoint>> referenced = WithReferences(sparse, out.dense, name);
  if (!referenced.ok()) return referenced.status();
  const std::vector<double>& first = out.dense[0].fit.raw;
  std::vector<std::optional<double>> fixed2 = fixed.all;
  fixed2.resize(kP);
  for (int k = 0; k < kDense; ++k) fixed2[k] = first[k];
  FitSetup setup2 = Starts(fixed2, previous ? &previous->extras : nullptr, Law::StartGrid(), kDense,
                           kP - kDense, first);
  absl::StatusOr<FitResult> stage2 = FitLaw<Law>(*referenced, options, setup2);
  if (!stage2.ok()) {
    return absl::Status(stage2.status().code(),
                        absl::StrCat(name, " law, stage 2 (extras on the ", sparse.size(), " ",
                                     Law::RunsName(), " runs): ", stage2.status().message()));
  }
  out.extras = *stage2;
  FitResult all = *stage2;
  std::vector<const FitResult*> parts;
  for (const ContextFit& c : out.dense) parts.push_back(&c.fit);
  parts.push_back(&*stage2);
  Combine(parts, &all);
  all.starts = stage2->starts;
  all.converged = stage2->converged;
  for (const ContextFit& c : out.dense) {
    all.starts += c.fit.starts;
    all.converged = all.converged && c.fit.converged;
  }
  if (joint) {
    // Every parameter together (one context), from the two-stage optimum and from
    // the dense optimum with each extras start of the grid.
    std::vector<LawPoint> both = dense;
    both.insert(both.end(), sparse.begin(), sparse.end());
    FitSetup setup;
    setup.fixed = fixed.all;
    setup.starts.push_back(stage2->raw);
    if (previous != nullptr) {
      for (const auto& o : previous->fit.optima) setup.starts.push_back(o);
    } else {
      const auto grid = Law::StartGrid();
      for (const auto& e : GridProduct({grid.begin() + kDense, grid.end()})) {
        std::vector<double> s(first.begin(), first.end());
        s.insert(s.end(), e.begin(), e.end());
        setup.starts.push_back(s);
      }
    }
    const int before = all.starts;
    ASSIGN_OR_RETURN(all, FitLaw<Law>(both, options, setup));
    all.starts += before;
  }
  out.fit = std::move(all);
  return out;
}

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_STAGES_H_
