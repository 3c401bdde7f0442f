// MakeLawSpec<Law>(): a registry row (law_registry.h) from a law struct (law.h).
// Only the table (law_registry.cc) and a program registering a law of its own
// include this; it pulls in the fitter (Ceres).
#ifndef XMOD_ORCHESTRATOR_FIT_MAKE_LAW_H_
#define XMOD_ORCHESTRATOR_FIT_MAKE_LAW_H_

#include <vector>

#include "orchestrator/fit/joint_refit.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/fit/stages.h"

namespace xmod {

template <typename Law>
LawSpec MakeLawSpec() {
  static_assert(Law::kDenseParameters == 0 || Law::kDenseParameters == DenseLaw::kParameters,
                "a law either starts with the dense law's five parameters or has none of them");
  static_assert(!(Law::kTwoStage && Law::kAcrossContexts),
                "a two-stage law's reference is fitted per context");
  static_assert(!Law::kTwoStage || Law::kDenseParameters == DenseLaw::kParameters,
                "a two-stage law fits its extras against the dense law");
  LawSpec s;
  s.name = Law::Name();
  s.label = Law::Label();
  s.parameters = Law::ReportedNames();
  s.bounds = Law::Bounds();
  for (int k = 0; k < Law::kParameters; ++k) s.log_scaled.push_back(Law::LogScaled(k));
  s.two_stage = Law::kTwoStage;
  s.dense_parameters = Law::kDenseParameters;
  s.families = Law::Families();
  s.csv_columns = Law::CsvColumns();
  s.csv_optional = Law::CsvOptional();
  s.holdout_columns = Law::HoldoutColumns();
  s.runs_name = Law::RunsName();
  s.reads = &Law::Reads;
  s.applies = &Law::Applies;
  s.check_csv_row = &Law::CheckCsvRow;
  s.check_design = &Law::CheckDesign;
  s.derived = &Law::Derived;
  s.derived_note = Law::DerivedNote();
  s.log_loss = [](const double* raw, const LawPoint& x) { return Law::LogLoss(raw, x); };
  if constexpr (Law::kTwoStage) {
    s.fit = &FitTwoStage<Law>;
    s.joint_log_loss = &JointLogLoss<Law>;
  } else if constexpr (Law::kAcrossContexts) {
    s.fit = &FitAcrossContexts<Law>;
  } else {
    s.fit = &FitSingleStage<Law>;
  }
  return s;
}

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_MAKE_LAW_H_
