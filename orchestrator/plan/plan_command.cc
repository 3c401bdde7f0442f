#include "orchestrator/plan/plan_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "orchestrator/plan/calibrate.h"
#include "orchestrator/plan/cluster.h"
#include "orchestrator/plan/layout_search.h"
#include "orchestrator/plan/plan_csv.h"

namespace xmod {

namespace {

absl::Status CheckFormat(const std::string& format, bool csv) {
  if (format == "table" || format == "json" || (csv && format == "csv")) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--format: '", format, "' is not one of table, ", csv ? "csv, " : "", "json"));
}

// The profile and the efficiencies to use: the calibration's when given.
absl::Status LoadCluster(const PlanCommandOptions& o, ClusterProfile* cluster, Efficiency* eff) {
  if (o.cluster.empty()) return absl::InvalidArgumentError("--cluster: a profile file is required");
  ASSIGN_OR_RETURN(*cluster, LoadClusterProfile(o.cluster));
  *eff = cluster->efficiency;
  if (!o.calibration.empty()) {
    ASSIGN_OR_RETURN(*eff, LoadCalibration(o.calibration, *cluster));
  }
  return absl::OkStatus();
}

std::string LayoutText(const Layout& l) {
  std::string s = absl::StrCat("tp ", l.tp, " pp ", l.pp);
  if (l.interleave > 1) absl::StrAppend(&s, "x", l.interleave);
  absl::StrAppend(&s, " dp ", l.dp);
  if (l.ep > 1) absl::StrAppend(&s, " ep ", l.ep);
  absl::StrAppend(&s, " mb ", l.micro_batch, " zero ", l.zero_stage, " recompute ",
                  RecomputeName(l.recompute));
  return s;
}

nlohmann::json PredictionJson(const Layout& l, const Prediction& p) {
  const ParallelMemoryEstimate& m = p.memory;
  return {{"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"hfu", p.hfu},
          {"step_s", p.step_s},
          {"memory_gb", p.memory_gb},
          {"fits", p.fits},
          {"step",
           {{"compute_s", p.compute_s},
            {"bubble_s", p.bubble_s},
            {"tp_comm_s", p.tp_comm_s},
            {"pp_comm_s", p.pp_comm_s},
            {"ep_comm_s", p.ep_comm_s},
            {"dp_comm_s", p.dp_comm_s},
            {"optimizer_s", p.optimizer_s}}},
          {"memory",
           {{"weights_gb", m.weights / 1e9},
            {"gradients_gb", m.gradients / 1e9},
            {"optimizer_gb", m.optimizer / 1e9},
            {"activations_gb", m.activations / 1e9},
            {"logits_gb", m.logits / 1e9},
            {"buffers_gb", m.buffers / 1e9}}},
          {"layout",
           {{"gpus", l.gpus},
            {"tp", l.tp},
            {"pp", l.pp},
            {"interleave", l.interleave},
            {"dp", l.dp},
            {"ep", l.ep},
            {"micro_batch", l.micro_batch},
            {"global_batch", l.global_batch},
            {"zero_stage", l.zero_stage},
            {"recompute", RecomputeName(l.recompute)},
            {"sequence_parallel", l.sequence_parallel && l.tp > 1},
            {"precision", PrecisionName(l.precision)}}}};
}

}  // namespace

absl::Status RunPlanPredict(const PlanCommandOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(CheckFormat(o.format, true));
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.configs.empty()) return absl::InvalidArgumentError("--configs: a CSV file is required");
  ASSIGN_OR_RETURN(const std::vector<PlanRow> rows, ReadPlanRows(o.configs, false));
  std::vector<Prediction> predictions;
  for (const PlanRow& r : rows) predictions.push_back(Predict(r.model, r.layout, cluster, eff));
  if (o.format == "json") {
    nlohmann::json all = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      nlohmann::json j = PredictionJson(rows[i].layout, predictions[i]);
      j["row"] = rows[i].where;
      if (!rows[i].name.empty()) j["name"] = rows[i].name;
      all.push_back(j);
    }
    out << all.dump(2) << "\n";
    return absl::OkStatus();
  }
  if (o.format == "csv") {
    out << "row,tokens_per_s,mfu,hfu,step_s,memory_gb,fits,compute_s,bubble_s,tp_comm_s,"
           "pp_comm_s,ep_comm_s,dp_comm_s,optimizer_s\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Prediction& p = predictions[i];
      out << absl::StrFormat("%d,%.6g,%.4f,%.4f,%.6g,%.4g,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n",
                             i + 1, p.tokens_per_s, p.mfu, p.hfu, p.step_s, p.memory_gb,
                             p.fits ? 1 : 0, p.compute_s, p.bubble_s, p.tp_comm_s, p.pp_comm_s,
                             p.ep_comm_s, p.dp_comm_s, p.optimizer_s);
    }
    return absl::OkStatus();
  }
  out << absl::StrFormat("cluster %s (%s)%s\n", cluster.name, cluster.device,
                         o.calibration.empty() ? ", uncalibrated" : ", calibrated");
  out << absl::StrFormat("%-4s %12s %6s %9s %8s %9s %9s %9s %9s  %s\n", "row", "tokens/s", "MFU",
                         "step s", "memory", "compute", "bubble", "tp comm", "dp comm", "layout");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Prediction& p = predictions[i];
    out << absl::StrFormat("%-4d %12.0f %6.3f %9.3f %6.1fGB %9.3f %9.3f %9.3f %9.3f  %s%s\n", i + 1,
                           p.tokens_per_s, p.mfu, p.step_s, p.memory_gb, p.compute_s, p.bubble_s,
                           p.tp_comm_s, p.dp_comm_s, LayoutText(rows[i].layout),
                           p.fits ? "" : "  DOES NOT FIT (over 90% of the device)");
  }
  return absl::OkStatus();
}

absl::Status RunPlanCalibrate(const PlanCommandOptions& o, std::ostream& out) {
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.measured.empty()) return absl::InvalidArgumentError("--measured: a CSV file is required");
  if (o.out.empty()) return absl::InvalidArgumentError("--out: the calibration file to write");
  ASSIGN_OR_RETURN(const std::vector<PlanRow> rows, ReadPlanRows(o.measured, true));
  ASSIGN_OR_RETURN(const CalibrationResult r, Calibrate(cluster, eff, rows));
  const nlohmann::json j = CalibrationToJson(cluster, r, rows);
  // Written whole to a temporary name, then renamed: a failed write leaves nothing.
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) return absl::PermissionDeniedError(absl::StrCat(o.out, ": cannot write"));
    f << j.dump(2) << "\n";
    if (!f) return absl::DataLossError(absl::StrCat(o.out, ": write failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o.out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(o.out, ": ", ec.message()));
  out << absl::StrFormat(
      "calibrated %s on %d runs (%s): median |error| %.1f%% (%.1f%% before), 90th percentile "
      "%.1f%%, largest %.1f%%\nwrote %s\n",
      cluster.name, r.rows, r.converged ? "converged" : "NOT converged", 100 * r.median_error,
      100 * r.median_error_before, 100 * r.p90_error, 100 * r.max_error, o.out);
  return absl::OkStatus();
}

absl::Status RunPlanLayout(const PlanCommandOptions& o, std::ostream& out) {
  RETURN_IF_ERROR(CheckFormat(o.format, false));
  ClusterProfile cluster;
  Efficiency eff;
  RETURN_IF_ERROR(LoadCluster(o, &cluster, &eff));
  if (o.family != "dense") {
    return absl::InvalidArgumentError(
        "--family: `plan layout` takes a dense GPT-style model from flags; other families go "
        "through `plan predict --configs` rows");
  }
  if (o.mlp != "gelu" && o.mlp != "swiglu") {
    return absl::InvalidArgumentError("--mlp: gelu or swiglu");
  }
  if (o.d_model <= 0 || o.n_layers <= 0 || o.n_heads <= 0 || o.global_batch <= 0 || o.gpus <= 0) {
    return absl::InvalidArgumentError(
        "--d-model, --n-layers, --n-heads, --gpus and --global-batch must be > 0");
  }
  if (o.d_model % o.n_heads != 0) {
    return absl::InvalidArgumentError("--n-heads: must divide --d-model");
  }
  PlanModel m;
  m.style = BlockStyle::kGpt;
  m.mlp = o.mlp == "gelu" ? MlpKind::kGelu : MlpKind::kSwiglu;
  m.kv_heads = o.kv_heads;
  m.shape.family = Family::kDense;
  m.shape.d_model = o.d_model;
  m.shape.n_layers = o.n_layers;
  m.shape.n_heads = o.n_heads;
  m.shape.d_ff = o.d_ff > 0 ? o.d_ff : 4 * o.d_model;
  m.shape.vocab_size = o.vocab;
  m.shape.context = o.seq_len;
  LayoutQuery q;
  q.gpus = o.gpus;
  q.global_batch = o.global_batch;
  q.top = o.top;
  if (o.precision == "bf16") {
    q.precision = Precision::kBf16;
  } else if (o.precision == "fp16") {
    q.precision = Precision::kFp16;
  } else if (o.precision == "fp8") {
    q.precision = Precision::kFp8;
  } else if (o.precision == "fp32") {
    q.precision = Precision::kFp32;
  } else {
    return absl::InvalidArgumentError("--precision: bf16, fp16, fp8 or fp32");
  }
  const LayoutSearchResult r = SearchLayouts(m, cluster, eff, q);
  if (o.format == "json") {
    nlohmann::json j;
    j["cluster"] = cluster.name;
    j["considered"] = r.considered;
    j["fitting"] = r.fitting;
    j["layouts"] = nlohmann::json::array();
    for (const LayoutChoice& c : r.best)
      j["layouts"].push_back(PredictionJson(c.layout, c.prediction));
    out << j.dump(2) << "\n";
  } else {
    out << absl::StrFormat(
        "%d GPUs of %s, global batch %d x %d tokens: %d layouts considered, %d fit in 90%% of "
        "%.0f GB\n",
        o.gpus, cluster.name, o.global_batch, o.seq_len, r.considered, r.fitting,
        cluster.hbm_bytes / 1e9);
    for (size_t i = 0; i < r.best.size(); ++i) {
      const Prediction& p = r.best[i].prediction;
      out << absl::StrFormat(
          "%s %-52s %10.0f tokens/s  MFU %.3f  step %.2f s  %.1f GB (bubble %.2f, tp %.2f, dp "
          "%.2f s)\n",
          i == 0 ? "best" : "    ", LayoutText(r.best[i].layout), p.tokens_per_s, p.mfu, p.step_s,
          p.memory_gb, p.bubble_s, p.tp_comm_s, p.dp_comm_s);
    }
  }
  if (r.best.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "no layout fits: the smallest (%s) needs %.1f GB of %.0f GB; add GPUs or shrink the "
        "global batch",
        LayoutText(r.smallest.layout), r.smallest.prediction.memory_gb, cluster.hbm_bytes / 1e9));
  }
  return absl::OkStatus();
}

}  // namespace xmod
