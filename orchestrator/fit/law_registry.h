// The laws xmod knows, as one table (law_registry.cc): every place that offers,
// reads, fits, checks, prints or plots a law iterates it instead of naming laws.
// A row is made from a law struct (law.h) by MakeLawSpec<Law>() (make_law.h).
// This header is light (no Ceres): the sweep side includes it for the design check.
#ifndef XMOD_ORCHESTRATOR_FIT_LAW_REGISTRY_H_
#define XMOD_ORCHESTRATOR_FIT_LAW_REGISTRY_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "orchestrator/fit/law.h"

namespace xmod {

struct Fitted;      // stages.h
struct Fixed;       // stages.h
struct FitOptions;  // fitter.h

struct LawSpec {
  std::string name;   // --law NAME, design.laws, the fits table
  std::string label;  // in reports and plots ("X-MoD")
  // Reported parameter names in internal order, the internal bounds, and which
  // reported values are exp(internal) (A, B, E).
  std::vector<std::string> parameters;
  std::vector<std::pair<double, double>> bounds;
  std::vector<bool> log_scaled;
  bool two_stage = false;             // the dense law per context first, then the extras
  int dense_parameters = 0;           // leading parameters that are the dense law's (0 or 5)
  std::vector<std::string> families;  // sweep families whose runs become its points
  std::vector<std::string> csv_columns, csv_optional;  // required / read when present
  std::vector<std::string> holdout_columns;            // shown in a hold-out table
  std::string runs_name;                               // "sparse", "MoE": stage 2's runs
  bool (*reads)(const LawPoint&) = nullptr;            // the points it fits
  bool (*applies)(const SweepFamilies&) = nullptr;     // fitted by default for a sweep
  absl::Status (*check_csv_row)(const LawPoint&) = nullptr;
  void (*check_design)(const std::vector<LawPoint>&, DesignSink*) = nullptr;
  // Identifiable quantities of the parameters (law.h, LawDefaults::Derived).
  std::vector<std::pair<std::string, double>> (*derived)(
      const double* raw, const std::vector<LawPoint>& points) = nullptr;
  std::string derived_note;
  // Predicted log-loss at internal parameters `raw` (size: parameters.size()).
  double (*log_loss)(const double* raw, const LawPoint&) = nullptr;
  // The fit of the points it reads (stages.h).
  absl::StatusOr<Fitted> (*fit)(const std::vector<LawPoint>& points, bool joint, const Fixed& fixed,
                                const FitOptions& options, const Fitted* previous) = nullptr;
  // A two-stage law's joint least-squares refit (joint_refit.h): the predicted
  // log-loss of each point with every parameter free, started from `start`, a
  // two-stage fit of the same points; null for the other laws.
  absl::StatusOr<std::vector<double>> (*joint_log_loss)(const std::vector<LawPoint>& points,
                                                        const Fitted& start,
                                                        const Fixed& fixed) = nullptr;
};

// Every law, in the table's order (the dense law first).
const std::vector<LawSpec>& Laws();
// The law called `name`, or null.
const LawSpec* FindLaw(const std::string& name);
// The laws' names, in order.
std::vector<std::string> LawNames();
// "unknown law 'x' (known: dense, xmod, moe)".
std::string UnknownLaw(const std::string& name);
// The laws fitted by default for a sweep of `families` (those whose applies() holds).
std::vector<std::string> DefaultLaws(const SweepFamilies& families);

// Adds a law after the table's rows: for a program that carries a law of its own
// (the tests' law). Call before any other thread reads the registry. INVALID_ARGUMENT
// when the name is taken.
absl::Status RegisterLaw(LawSpec spec);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_LAW_REGISTRY_H_
