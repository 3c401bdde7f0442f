// `xmod fit` and `xmod plot`: the scaling-law side of the command line. The fits
// themselves live in orchestrator/fit/; this file reads the points (a CSV file or
// a sweep's results in the database), prints reports, stores fits, and draws the
// plots with gnuplot.
#ifndef XMOD_ORCHESTRATOR_REPORT_REPORT_H_
#define XMOD_ORCHESTRATOR_REPORT_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/accounting.h"
#include "orchestrator/fit/advise.h"
#include "orchestrator/fit/analysis.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

struct FitCommandOptions {
  std::string sweep;  // fit a sweep's results (with db) ...
  std::string db;
  std::string csv;  // ... or a CSV file
  std::string law = "dense";
  std::string format = "table";
  int exclude_top_loss = 0;
  bool holdout_largest = false;
  bool joint = false;
  int bootstrap = 0;
  uint64_t seed = 0;
  int threads = 0;
  std::vector<std::string> fix;          // NAME=VALUE, reported units
  std::string metric = "auto";           // auto | val_loss | val_loss_causal
  std::string params = "non-embedding";  // non-embedding | total (N counts the embeddings too)
  int64_t context = 0;                   // only the runs at this T (0: every context)
  int64_t granularity = 0;  // moe: only the MoE runs of this granularity (0: the one there is)
};

absl::Status RunFitCommand(const FitCommandOptions& options, std::ostream& out);

// One NAME=VALUE of a repeatable flag (--fix, --assume); INVALID_ARGUMENT naming
// `flag` and showing `example` when it is not one.
absl::StatusOr<std::pair<std::string, double>> ParseNameValue(const std::string& item,
                                                              const std::string& flag,
                                                              const std::string& example);

// A sweep's design.fix (law -> parameter -> value), read from the text it was
// submitted with. NOT_FOUND for no such sweep.
using DesignFix = std::map<std::string, std::map<std::string, double>>;
absl::StatusOr<DesignFix> SweepDesignFix(StoreReader& store, const std::string& sweep);

struct PlotCommandOptions {
  std::string sweep;
  std::string db;
  std::string out_dir;
  std::string image = "svg";  // svg or png
  int threads = 0;
};

absl::Status RunPlotCommand(const PlotCommandOptions& options, std::ostream& out);

// `xmod advise SWEEP --db FILE --compute C --context T` (advise_command.cc).
struct AdviseCommandOptions {
  std::string sweep;
  std::string db;
  std::string format = "table";  // table or json
  std::string metric = "auto";
  AdviseOptions advise;
  int calibrate = 0;     // --calibrate N: N simulated sweeps per truth (calibrate.h)
  double misfit = -1.0;  // --misfit: the perturbed truth's RMS misfit (< 0: measured)
};

absl::Status RunAdviseCommand(const AdviseCommandOptions& options, std::ostream& out);

// The advice on a stored sweep's finished runs (its design.fix applied), the
// command's and the dashboard's: `metric` as --metric; a `compute` or `context`
// of 0 in `options` becomes the largest training compute the runs reached
// (6 · N_active · D) or their largest context. `runs` (optional) receives how
// many runs the laws read, `points` (optional) the runs. INVALID_ARGUMENT before
// any run finished.
absl::StatusOr<Advice> AdviseSweep(StoreReader& store, const std::string& sweep,
                                   AdviseOptions options, const std::string& metric,
                                   int* runs = nullptr, std::vector<LawPoint>* points = nullptr);

// Which number of a job a law reads.
struct PointOptions {
  // auto: routed families (xmod, mod) by val_loss_causal, dense by val_loss (the
  // same number for them); val_loss: the top-k loss for every family.
  std::string metric = "auto";
  bool total_params = false;  // N and N_total include the embedding and head
  // The law the points are for: its families (dense, xmod: dense and xmod jobs;
  // moe: dense and moe jobs).
  std::string law = "dense";
};

// The law's view of a job (capacity as k/T, stride 1 for dense runs, D the
// tokens trained, the loss the metric selects and its standard error, 0 when the
// job has none; a moe job has capacity 1, stride 1 and its expansion E/k).
LawPoint ToLawPoint(const JobResultRow& job, const PointOptions& options = {});

// `xmod results`: the job_results rows of `sweep` (NOT_FOUND for no such sweep) without
// the grouping key config_key. The dashboard's /api/jobs serves the same.
absl::StatusOr<QueryResult> ResultsTable(StoreReader* store, const std::string& sweep);

// One row per configuration (a job's config without its seed): its seeds, the
// mean of the fitted loss (val_loss_causal for routed runs), the seed-to-seed
// standard deviation and the mean evaluation standard error.
QueryResult ReplicateTable(const std::vector<JobResultRow>& jobs);

// Each sized baseline (moe, deco) beside the job it was sized against: the X-MoD
// job of its sizing (same scale, context, budget and seed), or the dense job for
// deco and for a moe baseline of a dense block. Columns: the baseline's id,
// family, scale, context, seed, experts, matched_to, the matched job's id, both
// final losses (top-k for the baselines and the dense model, causal for X-MoD, as
// the laws read them), loss_ratio, params_ratio (total) and flops_ratio (training
// FLOPs per token). A baseline whose matched job has no loss yet has empty cells.
QueryResult BaselineComparison(const std::vector<JobResultRow>& jobs);

// Compute-matched paired differences (pairs.cc): each routed configuration (X-MoD,
// MoD, MoE, DECO, seeds together) beside the dense runs of its scale, context and
// budget: mean losses (the causal metric for routed families), their difference
// with a seed standard error from the sweep's pooled seed sd and a 95% interval,
// the training-FLOPs ratio and whether that is matched within 1%, the total-
// parameter ratio, and the realised capacity flagged when it exceeds the
// nominal one by more than 5%.
QueryResult PairedDifferences(const std::vector<JobResultRow>& jobs);

// The lr scan's choice at one family and scale (train.lr_scan): the mean final
// loss at each factor over the configurations that finished every factor, and
// the factor with the lowest (1 when fewer than two factors finished everywhere).
struct LrScanChoice {
  std::string family, scale;
  std::map<double, double> mean_loss;  // factor -> mean over the configurations
  int configurations = 0;              // that scanned
  double factor = 1.0;                 // the scan's best factor there
  bool complete = false;
  // Whether the runs are read at `factor`: only when the family's scan covers every
  // scale at which it has finished runs (one lr protocol at every scale the laws
  // read); otherwise every scale reads the sweep's own lr (the rule) and
  // `unscanned` names the scales the scan missed.
  bool applied = false;
  std::vector<std::string> unscanned;
};

// The runs the laws, pairs and slopes read: `jobs` as they are for a sweep without
// an lr scan; with one, one protocol per family: where its scan covers every
// scale it has finished runs at, each configuration at the family's best factor
// at each scale (its sweep lr where it has no finished run at that factor); else
// every configuration at the sweep's own lr everywhere (a tuned lr at the small
// scales and the rule's at the large ones would bias the exponents:
// docs/laws.md, "One lr protocol"). The other factors are left out. `choices`
// (optional) gets the choices.
std::vector<JobResultRow> BestLrRuns(const std::vector<JobResultRow>& jobs,
                                     std::vector<LrScanChoice>* choices = nullptr);

// `xmod results --lr-scan`: one row per family, scale and factor with its mean
// loss, the chosen factor marked "best".
QueryResult LrScanTable(const std::vector<JobResultRow>& jobs);

// The points a law is fitted to: succeeded jobs of the law's families with a
// final val_loss (MoD baselines use a different gate and DECO a different router;
// neither is a point of any law).
std::vector<LawPoint> FitPoints(const std::vector<JobResultRow>& jobs,
                                const PointOptions& options = {});

// The runs `xmod advise` reads: those of the xmod and moe laws (dense, X-MoD, MoE),
// once each. Succeeded runs of other families go into `notes` as unranked.
absl::StatusOr<std::vector<LawPoint>> AdvicePoints(const std::vector<JobResultRow>& jobs,
                                                   const PointOptions& options,
                                                   std::vector<std::string>* notes);

// The advice as a report for people.
void PrintAdvice(const Advice& advice, std::ostream& out);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_REPORT_REPORT_H_
