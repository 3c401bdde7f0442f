// The design check: can a sweep identify the laws it will be fitted with, and are
// its jobs what the laws assume? Run before anything is trained (`xmod check`,
// `xmod expand`, `xmod submit`, `xmod run`); docs/design-checks.md states every
// rule and why. Errors refuse the sweep (an expert can override them with
// --allow-unidentifiable); warnings are printed.
#ifndef XMOD_ORCHESTRATOR_SWEEP_DESIGN_CHECK_H_
#define XMOD_ORCHESTRATOR_SWEEP_DESIGN_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "orchestrator/fit/law.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

namespace xmod {

struct DesignFinding {
  bool error = false;
  int line = 1;
  std::string field;
  std::string message;
};

struct DesignReport {
  std::vector<std::string> laws;  // the laws checked
  std::vector<DesignFinding> findings;
  std::vector<std::string> notes;  // what each law can fit, one line each
  bool ok() const;
  // "file:line: field: message" per finding, errors first, then the notes.
  std::string Text(const std::string& source) const;
};

DesignReport CheckDesign(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs);

// A planned job as a law sees it, without a loss: family, N_active, N_total, the
// tokens it will train, T, capacity (routed tokens / T), stride, layers and, for
// an expert model, its expansion E/k and granularity.
LawPoint PlannedPoint(const ResolvedJob& job);

// The laws a sweep is checked and fitted for: design.laws when given, else every
// law of the registry whose applies() holds for the sweep's block and baseline
// families (orchestrator/fit/law_registry.h).
std::vector<std::string> SweepLaws(const SweepSpec& spec);

// OK when the report has no error (or `allow` is set); otherwise INVALID_ARGUMENT
// with the errors and how to override them.
absl::Status DesignStatus(const DesignReport& report, const std::string& source, bool allow);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SWEEP_DESIGN_CHECK_H_
