// `xmod advise`: the decision a sweep is run for (docs/laws.md, "Advice"). Given a
// training compute C, a context T and optionally an active size N, which
// configuration should one train: dense, each X-MoD (sparsity, stride) the sweep
// ran, each MoE expansion the sweep ran; with its predicted loss and interval, its
// gain over the FLOP-matched dense model, and its probability of being the best
// over the bootstrap refits. The laws are refitted here from the points (seconds),
// each X-MoD form competing on its information criterion and held-out error; the
// decision is re-made on a refit without the largest decisive scale and checked
// against what that scale observed.
//
// Definitions (docs/laws.md): C = 6 · N_active · D; a configuration's N_total is
// its runs' median N_total / N_active times N_active; without --n-active each
// configuration trains at the N_active that minimises its predicted loss at C,
// searched where the sweep has data (N_active and tokens per active parameter
// D / N_active inside the ranges of the fitted runs) unless extrapolating.
#ifndef XMOD_ORCHESTRATOR_FIT_ADVISE_H_
#define XMOD_ORCHESTRATOR_FIT_ADVISE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/fit/law.h"

namespace xmod {

// Below this difference in (quasi-)AIC two forms are reported as indistinguishable
// (Burnham & Anderson's rule of thumb: within 2, both have substantial support).
constexpr double kIndistinguishable = 2.0;

struct AdviseOptions {
  double compute = 0.0;   // C: training FLOPs, 6 · N_active · D
  double context = 0.0;   // T; must be a context the sweep ran
  double n_active = 0.0;  // 0: each configuration at its compute-optimal N_active
  bool extrapolate = false;
  int bootstrap = 200;  // refits behind the intervals and the probabilities
  uint64_t seed = 0;
  double confidence = 0.95;
  int threads = 0;
  // The X-MoD correction forms that compete (law names); the one with the lowest
  // information criterion gives the advice.
  std::vector<std::string> forms = {"xmod", "xmod-scaled"};
  // Parameters frozen per law (the sweep's design.fix): law -> reported name -> value.
  std::map<std::string, std::map<std::string, double>> fixed;
  bool holdout = true;  // re-make the decision without the largest decisive scale
  // Fit the dense reference's two forms where the runs span two or more contexts
  // (always, when --context is one the sweep did not run).
  bool dense_forms = true;
};

// A configuration one could train, as the sweep ran it.
struct Configuration {
  std::string name;    // "dense", "xmod sparsity=0.5 stride=2", "moe E/k=4", "mol E_b=2",
                       // "gdn share=1"
  std::string family;  // "dense", "xmod", "moe", "mol", "gdn"
  double capacity = 1.0;
  double stride = 1.0;
  double expansion = 1.0;
  double block_expansion = 0.0;                   // mol: (N − S)/k
  double deltanet_share = 0.0;                    // gdn: its share of Gated DeltaNet layers
  double total_ratio = 1.0;                       // N_total / N_active, median over its runs
  std::vector<std::pair<double, double>> layers;  // (N_active, L) of its runs
  int runs = 0;
  // Its own runs' support: training compute 6 N_active D, N_active, and tokens per
  // active parameter D / N_active. A row is ranked inside them (or, with
  // --extrapolate, marked with how far outside it is).
  double compute_min = 0.0, compute_max = 0.0;
  double n_min = 0.0, n_max = 0.0;
  double tpp_min = 0.0, tpp_max = 0.0;

  // The law's view of this configuration at N_active `n`, D tokens, context T (the
  // layer count of its run nearest in N_active).
  LawPoint At(double n, double d, double context) const;
};

struct ConfigurationAdvice {
  Configuration configuration;
  std::string law;         // the law that predicts it
  double n_active = 0.0;   // at the full fit's optimum (or --n-active)
  double tokens = 0.0;     // D = C / (6 N_active)
  double loss = 0.0;       // predicted, nats (full fit)
  Interval loss_interval;  // over the refits
  double gain = 0.0;       // dense loss − this loss at C (nats); > 0: better than dense
  Interval gain_interval;  // over the refits (paired: the same refit's dense loss)
  double p_best = 0.0;     // share of refits in which it has the lowest loss
  bool at_edge = false;    // its optimal N_active sits on the searched range's edge
  // How far outside its own runs the row is (empty: inside); only with --extrapolate.
  std::string extrapolation;
};

// One competing X-MoD form.
struct FormAdvice {
  std::string law;
  bool fitted = false;
  std::string error;  // why it was not fitted
  InformationCriterion information;
  std::map<std::string, double> params;  // the full fit's, by reported name
  // The quasi-AIC: (AIC − 2p) / ĉ + 2p with the advice's ĉ (Advice::c_hat); the
  // AIC itself where ĉ = 1.
  double qaic = 0.0;
  LackOfFit lack_of_fit;
  std::vector<std::string> on_bound;
  double holdout_rmse = -1.0;  // log-loss RMSE on the held-out scales (-1: no hold-out)
  int holdout_points = 0;
  std::string holdout_choice;  // the configuration its hold-out fit picks there
  std::string best;            // the configuration it picks at C (full fit)
  double p_best = 0.0;         // of `best`, over its refits
};

// The decision re-made without the largest scale at which two or more
// configurations ran at one training compute (6 N_active D within 1%: under
// match: training_flops the runs of one budget), against what that scale observed.
// Every ranked configuration with runs at that compute is compared; the refit
// needs three or more dense scales below the held-out one.
struct DecisionHoldout {
  bool available = false;
  std::string why;
  std::string scale;
  double compute = 0.0;           // the compared runs' training FLOPs (median)
  double tokens_per_param = 0.0;  // their D / N_active (median)
  int dense_scales = 0;           // dense scales the refit had
  struct Row {
    std::string configuration;
    int runs = 0;
    double observed = 0.0;     // mean loss over its seeds
    double observed_sd = 0.0;  // seed sd (0 with one seed)
    double predicted = 0.0;    // by the fit without this scale and the larger ones
  };
  std::vector<Row> rows;      // every configuration compared
  std::string chosen;         // lowest predicted
  std::string observed_best;  // lowest observed
  bool agrees = false;        // chosen == observed_best
  double regret = 0.0;        // observed loss of the chosen over the best's, minus 1
  // The seed noise of that comparison: the sd of the difference of the two means
  // from the pooled seed sd of the compared configurations with two or more seeds
  // (0: none has).
  double noise = 0.0;
  // The advice's own pick (its top row at C), whether it ran at that compute, and
  // its observed loss there over the observed best's, minus 1.
  std::string pick;
  bool pick_ran = false;
  double pick_regret = 0.0;
  // The verdict, one of three: the decision holds (the refit's choice is the
  // observed best, and so is the advice's pick where it ran there); it FAILS (the
  // observed best beats the refit's choice, or the advice's pick, by more than two
  // noise sds); otherwise the hold-out cannot tell (another was observed best
  // within two noise sds, or there are no replicates to measure the noise).
  bool holds = false;
  bool fails = false;
  std::string verdict;  // "holds", "FAILS" or "cannot tell"
};

struct Advice {
  AdviseOptions options;
  std::string form;                       // the X-MoD form the advice uses ("" without X-MoD runs)
  std::vector<std::string> laws;          // every law behind the table
  std::vector<ConfigurationAdvice> rows;  // by predicted loss
  int refits = 0;                         // refits behind intervals and probabilities
  std::vector<FormAdvice> forms;
  // The dense reference's two forms when the runs span two or more contexts: the
  // dense law per context ("dense") and one law with a context term
  // ("dense-context"), each with its information criterion and lack of fit on the
  // dense runs; `kappa` is the context exponent of the second (with its interval
  // over the refits when it answers a context the sweep did not run).
  std::vector<FormAdvice> dense_forms;
  double kappa = 0.0;
  Interval kappa_interval;
  bool context_from_law = false;  // T was not run: its dense reference is dense-context's
  bool answer_changes = false;    // whether the fitted forms pick different configurations
  // Model choice among the X-MoD forms: ĉ, the variance inflation of a misfit (the
  // smallest lack-of-fit F among the forms when every tested form is rejected,
  // else 1); the difference in quasi-AIC between the two best forms; and whether
  // it is below kIndistinguishable (the forms are then equally supported).
  double c_hat = 1.0;
  double delta_ic = 0.0;
  bool forms_indistinguishable = false;
  // What the sweep supports: the fitted runs' ranges.
  double compute_min = 0.0, compute_max = 0.0;
  double n_min = 0.0, n_max = 0.0;
  double tpp_min = 0.0, tpp_max = 0.0;  // tokens per active parameter
  std::vector<double> contexts;
  std::string extrapolation;  // how far outside the support (empty: inside)
  // Configurations not ranked because the request lies outside their own runs
  // (without --extrapolate), each with how far: "xmod sparsity=0.5 stride=2 (C = ...)".
  std::vector<std::string> left_out;
  DecisionHoldout holdout;
  // The law behind the ranking (the X-MoD form used, or the dense law without
  // one) is rejected by its replicates: P(best) and the intervals assume a form
  // the runs reject, and the verdict says they are not calibrated.
  bool uncalibrated = false;
  // Laws behind the table with parameters on a bound (E -> 0, eta at 1, ...): the
  // runs do not identify them; "law: parameters" each.
  std::vector<std::string> unidentified;
  // The full fit that predicts each family's runs (dense, xmod, moe, mol, gdn),
  // reduced to what prediction needs: what `--calibrate` simulates from.
  std::map<std::string, LawReport> models;
  std::vector<std::string> notes;
  std::string verdict;
};

// The advice from `points` (the runs the laws read: dense, X-MoD and MoE).
// INVALID_ARGUMENT for a compute, context or N_active the sweep does not support
// (unless options.extrapolate, and never for an unrun context), for no dense runs,
// or when no law can be fitted.
absl::StatusOr<Advice> Advise(const std::vector<LawPoint>& points, const AdviseOptions& options);

nlohmann::json AdviceJson(const Advice& advice);

// A loss for a run: a fitted law's prediction, or a simulation's truth.
using LossFunction = std::function<double(const LawPoint&)>;

// Each configuration's lowest loss under `loss` at the options' compute and
// context, searched as Advise searches it (its own runs' support unless
// options.extrapolate; configurations outside it are absent): name -> loss. The
// truth a simulated advice is scored against (calibrate.h, power.h).
absl::StatusOr<std::map<std::string, double>> OptimalLosses(const LossFunction& loss,
                                                            const std::vector<LawPoint>& points,
                                                            const AdviseOptions& options);

// The loss `advice`'s fitted laws give `x` (its family's model), or +inf where
// none predicts it.
double FittedLoss(const Advice& advice, const LawPoint& x);

// The advice's default compute for `points`: the largest training compute at which
// every configuration has runs, so that the default advice stays inside each
// row's own support (the largest compute of all runs would extrapolate the
// configurations run only at smaller budgets).
double DefaultCompute(const std::vector<LawPoint>& points);

// The configurations `points` hold (dense first), as Advise ranks them.
std::vector<Configuration> SweepConfigurations(const std::vector<LawPoint>& points);

// A fitted law reduced to what prediction needs: the full fit (refit -1) or one
// bootstrap refit, with its dense reference per context.
LawReport RefitModel(const LawReport& full, int refit);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_FIT_ADVISE_H_
