#include "orchestrator/plan/codesign.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/stats.h"
#include "common/status_macros.h"

namespace xmod {

namespace {

// Seconds of each part of a step per model FLOP it trains.
struct Split {
  double compute = 0, bubble = 0, tp = 0, pp = 0, ep = 0, cp = 0, dp = 0, optimizer = 0;
};
Split PerFlop(const CodesignRow& r) {
  const Prediction& p = r.layout.prediction;
  const double flops = p.tokens_per_s * p.step_s * p.model_flops_per_token;
  Split s;
  s.compute = p.compute_s / flops;
  s.bubble = p.bubble_s / flops;
  s.tp = p.tp_comm_s / flops;
  s.pp = p.pp_comm_s / flops;
  s.ep = p.ep_comm_s / flops;
  s.cp = p.cp_comm_s / flops;
  s.dp = p.dp_comm_s / flops;
  s.optimizer = p.optimizer_s / flops;
  return s;
}

// Why the FLOPs-only optimum `f` is not the wall-clock optimum `w`.
std::string Constraint(const CodesignRow& f, const CodesignRow& w, double hbm) {
  const std::string name = f.candidate.name;
  if (!f.fits) {
    return absl::StrFormat(
        "memory: %s does not fit in 90%% of %.0f GB on any layout (the smallest needs %.1f GB)",
        name, hbm / 1e9, f.layout.prediction.memory_gb);
  }
  const Split a = PerFlop(f), b = PerFlop(w);
  struct Part {
    const char* what;
    double extra;
  };
  const Part parts[] = {
      {"expert all-to-all", a.ep - b.ep},
      {"data-parallel gradient and parameter traffic", a.dp - b.dp},
      {"pipeline bubble", a.bubble - b.bubble},
      {"tensor-parallel collectives", a.tp - b.tp},
      {"pipeline sends", a.pp - b.pp},
      {"context-parallel K/V exchange", a.cp - b.cp},
      {"kernel time (small matrix multiplications, recomputation)", a.compute - b.compute},
      {"optimizer step", a.optimizer - b.optimizer}};
  const Part* worst = &parts[0];
  for (const Part& p : parts) {
    if (p.extra > worst->extra) worst = &p;
  }
  const Prediction& pf = f.layout.prediction;
  const Prediction& pw = w.layout.prediction;
  std::string why = absl::StrFormat(
      "throughput: %s trains at MFU %.3f against %.3f for %s, so its GPU-hours buy %.2g tokens "
      "instead of the %.2g a FLOPs budget assumes; most of the difference is %s",
      name, pf.mfu, pw.mfu, w.candidate.name, f.tokens, f.flops_only_tokens, worst->what);
  if (std::string(worst->what) == "expert all-to-all") {
    absl::StrAppend(&why,
                    absl::StrFormat(" (%.0f%% of its step at %s)", 100 * pf.ep_comm_s / pf.step_s,
                                    LayoutText(f.layout.layout)));
  } else {
    absl::StrAppend(&why, absl::StrFormat(" (its layout: %s; %.1f GB per GPU)",
                                          LayoutText(f.layout.layout), pf.memory_gb));
  }
  return why;
}

}  // namespace

absl::StatusOr<CodesignResult> Codesign(const std::vector<CodesignCandidate>& candidates,
                                        const LossModel& loss, const ClusterProfile& cluster,
                                        const Efficiency& eff, const CodesignOptions& o) {
  if (!(o.gpu_hours > 0)) return absl::InvalidArgumentError("--gpu-hours: must be > 0");
  if (o.gpus < 1) return absl::InvalidArgumentError("--gpus: must be >= 1");
  if (o.global_batch < 1) return absl::InvalidArgumentError("--global-batch: must be >= 1");
  if (candidates.empty()) return absl::InvalidArgumentError("no candidate architectures");
  CodesignResult r;
  const double seconds = o.gpu_hours * 3600.0 / static_cast<double>(o.gpus);
  for (const CodesignCandidate& c : candidates) {
    CodesignRow row;
    row.candidate = c;
    LayoutQuery q;
    q.gpus = o.gpus;
    q.global_batch = o.global_batch;
    q.precision = o.precision;
    q.top = 1;
    const LayoutSearchResult s = SearchLayouts(c.model, cluster, eff, q);
    row.fits = !s.best.empty();
    row.layout = row.fits ? s.best[0] : s.smallest;
    row.n_active = c.point.n;
    row.n_total = c.point.NTotal();
    row.tokens = row.layout.prediction.tokens_per_s * seconds;
    r.rows.push_back(std::move(row));
  }
  // The FLOPs-only view: one model-FLOPs budget for every candidate, at the MFU of
  // the fastest candidate per model FLOP that fits (what a plan without a systems
  // model implicitly assumes every architecture reaches).
  for (const CodesignRow& row : r.rows) {
    if (row.fits) r.reference_mfu = std::max(r.reference_mfu, row.layout.prediction.mfu);
  }
  if (r.reference_mfu <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no candidate fits on %d GPUs of %s at a global batch of %d sequences",
                        o.gpus, cluster.name, o.global_batch));
  }
  const double peak =
      o.precision == Precision::kFp32 ? cluster.peak_flops_fp32 : cluster.peak_flops;
  r.model_flops = o.gpu_hours * 3600.0 * peak * r.reference_mfu;
  std::vector<std::vector<double>> refit_losses;
  for (CodesignRow& row : r.rows) {
    LawPoint x = row.candidate.point;
    x.d = row.tokens;
    ASSIGN_OR_RETURN(const LossPrediction wall, loss(x));
    row.loss = wall.loss;
    const double tail = (1.0 - o.confidence) / 2.0;
    row.low = wall.refits.empty() ? wall.loss : Quantile(wall.refits, tail);
    row.high = wall.refits.empty() ? wall.loss : Quantile(wall.refits, 1.0 - tail);
    refit_losses.push_back(row.fits ? wall.refits : std::vector<double>{});
    row.flops_only_tokens = r.model_flops / row.layout.prediction.model_flops_per_token;
    x.d = row.flops_only_tokens;
    ASSIGN_OR_RETURN(const LossPrediction flops, loss(x));
    row.flops_only_loss = flops.loss;
  }
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const CodesignRow& row = r.rows[i];
    if (row.fits && (r.best < 0 || row.loss < r.rows[r.best].loss)) r.best = static_cast<int>(i);
    if (r.flops_best < 0 || row.flops_only_loss < r.rows[r.flops_best].flops_only_loss) {
      r.flops_best = static_cast<int>(i);
    }
  }
  // P(best) over the refits (those every fitting candidate has).
  size_t refits = 0;
  for (const auto& v : refit_losses) {
    if (!v.empty()) refits = refits == 0 ? v.size() : std::min(refits, v.size());
  }
  if (refits > 0) {
    int wins = 0;
    for (size_t b = 0; b < refits; ++b) {
      int best = -1;
      for (size_t i = 0; i < r.rows.size(); ++i) {
        if (refit_losses[i].size() <= b) continue;
        if (best < 0 || refit_losses[i][b] < refit_losses[best][b]) best = static_cast<int>(i);
      }
      wins += best == r.best ? 1 : 0;
    }
    r.p_best = static_cast<double>(wins) / static_cast<double>(refits);
  }
  // Pareto set over (loss, N_total, memory) among the candidates that fit.
  for (size_t i = 0; i < r.rows.size(); ++i) {
    CodesignRow& a = r.rows[i];
    if (!a.fits) continue;
    bool dominated = false;
    for (size_t j = 0; j < r.rows.size() && !dominated; ++j) {
      const CodesignRow& b = r.rows[j];
      if (i == j || !b.fits) continue;
      const double ma = a.layout.prediction.memory_gb, mb = b.layout.prediction.memory_gb;
      const bool no_worse = b.loss <= a.loss && b.n_total <= a.n_total && mb <= ma;
      const bool better = b.loss < a.loss || b.n_total < a.n_total || mb < ma;
      dominated = no_worse && better;
    }
    a.pareto = !dominated;
  }
  if (r.best >= 0 && r.flops_best != r.best) {
    r.constraint = Constraint(r.rows[r.flops_best], r.rows[r.best], cluster.hbm_bytes);
  }
  return r;
}

nlohmann::json CodesignJson(const CodesignResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CodesignRow& row : r.rows) {
    const Prediction& p = row.layout.prediction;
    const Layout& l = row.layout.layout;
    rows.push_back({{"candidate", row.candidate.name},
                    {"configuration", row.candidate.configuration},
                    {"fits", row.fits},
                    {"n_active", row.n_active},
                    {"n_total", row.n_total},
                    {"layout", LayoutJson(l)},
                    {"tokens_per_s", p.tokens_per_s},
                    {"mfu", p.mfu},
                    {"memory_gb", p.memory_gb},
                    {"tokens", row.tokens},
                    {"loss", row.loss},
                    {"loss_low", row.low},
                    {"loss_high", row.high},
                    {"flops_only_tokens", row.flops_only_tokens},
                    {"flops_only_loss", row.flops_only_loss},
                    {"pareto", row.pareto}});
  }
  nlohmann::json j = {{"rows", rows},
                      {"model_flops", r.model_flops},
                      {"reference_mfu", r.reference_mfu},
                      {"p_best", r.p_best},
                      {"constraint", r.constraint}};
  j["best"] = r.best >= 0 ? nlohmann::json(r.rows[r.best].candidate.name) : nlohmann::json();
  j["flops_only_best"] =
      r.flops_best >= 0 ? nlohmann::json(r.rows[r.flops_best].candidate.name) : nlohmann::json();
  return j;
}

// Draws loss against the candidates, wall-clock and FLOPs-only, per width.
absl::Status DrawCodesign(const CodesignResult& r, const std::string& svg) {
  const std::filesystem::path path(svg);
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  const std::string stem = path.stem().string();
  {
    std::ofstream data(dir / (stem + ".dat"));
    data << "# index candidate loss low high flops_only_loss fits\n";
    for (size_t i = 0; i < r.rows.size(); ++i) {
      const CodesignRow& row = r.rows[i];
      std::string name = row.candidate.name;
      std::replace(name.begin(), name.end(), ' ', '_');
      data << i << " \"" << name << "\" " << row.loss << " " << row.low << " " << row.high << " "
           << row.flops_only_loss << " " << (row.fits ? 1 : 0) << "\n";
    }
    if (!data) return absl::PermissionDeniedError(absl::StrCat(svg, ": cannot write its data"));
  }
  {
    std::ofstream gp(dir / (stem + ".gp"));
    gp << "set terminal svg size 1000,560 dynamic\n"
       << "set output '" << path.filename().string() << "'\n"
       << "set title 'Predicted loss per candidate: GPU-hours on the cluster vs a FLOPs budget'\n"
       << "set ylabel 'predicted loss (nats)'\nset xtics rotate by -45 noenhanced\n"
       << "set key top right\nset grid ytics\n"
       << "plot '" << stem << ".dat' using 1:3:4:5:xtic(2) with yerrorlines lw 2 title "
       << "'wall-clock (layout, throughput, memory)', \\\n"
       << "     '" << stem << ".dat' using 1:6 with linespoints lw 2 dt 2 title "
       << "'FLOPs-only (same model FLOPs for all)'\n";
    if (!gp) return absl::PermissionDeniedError(absl::StrCat(svg, ": cannot write its script"));
  }
  const std::string command =
      absl::StrCat("cd '", dir.string(), "' && gnuplot '", stem, ".gp' 2> '", stem, ".log'");
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", (dir / (stem + ".gp")).string(),
                                            " (see ", (dir / (stem + ".log")).string(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace xmod
