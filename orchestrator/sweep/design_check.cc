#include "orchestrator/sweep/design_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace xmod {

namespace {

// Distinct (N, D) inputs of the dense law, by context.
using Inputs = std::set<std::pair<double, double>>;

int ScaleLine(const SweepSpec& spec, const std::string& name) {
  const ScaleSpec* s = spec.FindScale(name);
  return s != nullptr && s->line > 0 ? s->line : 1;
}

class Checker {
 public:
  Checker(const SweepSpec& spec, const std::vector<ResolvedJob>& jobs, DesignReport* report)
      : spec_(spec), jobs_(jobs), report_(report) {
    const std::vector<GridBlock> blocks = spec.Blocks();
    grid_line_ = blocks.empty() ? 1 : blocks.front().line;
    budget_line_ = blocks.empty() ? 1 : blocks.front().budget_line;
    for (const GridBlock& b : blocks) {
      if (b.family == Family::kDense ||
          std::count(b.baselines.begin(), b.baselines.end(), Family::kDense)) {
        budget_line_ = b.budget_line;
        break;
      }
    }
  }

  void Run() {
    bool any_xmod = false;
    for (const ResolvedJob& j : jobs_) any_xmod |= j.file.shape.family == Family::kXmod;
    bool moe_block = false;  // the moe law by default only for a sweep of the moe family
    for (const GridBlock& b : spec_.Blocks()) moe_block |= b.family == Family::kMoe;
    if (spec_.design.laws_given) {
      report_->laws = spec_.design.laws;
    } else {
      report_->laws = {"dense"};
      if (any_xmod) report_->laws.push_back("xmod");
      if (moe_block) report_->laws.push_back("moe");
    }
    auto named = [&](const char* law) {
      return std::count(report_->laws.begin(), report_->laws.end(), law) > 0;
    };
    const bool dense_law = named("dense"), xmod_law = named("xmod"), moe_law = named("moe");
    // Contexts at which a dense law must be fitted.
    std::set<int64_t> contexts;
    for (const ResolvedJob& j : jobs_) {
      if (dense_law && j.file.shape.family == Family::kDense) contexts.insert(j.file.shape.context);
      if (xmod_law && j.file.shape.family == Family::kXmod) contexts.insert(j.file.shape.context);
      if (moe_law && j.file.shape.family == Family::kMoe) contexts.insert(j.file.shape.context);
    }
    if (dense_law || xmod_law || moe_law) {
      if (contexts.empty()) {
        Error(grid_line_, "grid",
              "the sweep has no dense jobs, so no dense law can be fitted "
              "(add a dense block or baselines: [dense])");
      }
      for (int64_t t : contexts) CheckDenseAt(t);
    }
    if (xmod_law) CheckExtras();
    if (moe_law) CheckMoeExtras();
    if (dense_law || xmod_law || moe_law) CheckReplicates();
    CheckJobs();
  }

 private:
  void Error(int line, const std::string& field, const std::string& message) {
    for (const DesignFinding& f : report_->findings) {
      if (f.error && f.message == message) return;  // replicates and budgets repeat it
    }
    report_->findings.push_back({true, line, field, message});
  }
  void Warn(int line, const std::string& field, const std::string& message) {
    // Replicates and budgets of one model repeat the same warning: say it once.
    for (const DesignFinding& f : report_->findings) {
      if (!f.error && f.message == message) return;
    }
    report_->findings.push_back({false, line, field, message});
  }

  void CheckDenseAt(int64_t context) {
    Inputs inputs;
    std::map<double, std::set<double>> budgets;  // N -> distinct D
    for (const ResolvedJob& j : jobs_) {
      if (j.file.shape.family != Family::kDense || j.file.shape.context != context) continue;
      const double n = static_cast<double>(j.n_params_active);
      const double d = static_cast<double>(j.tokens_trained());
      inputs.insert({n, d});
      budgets[n].insert(d);
    }
    const std::string where = absl::StrCat("the dense law at T = ", context);
    if (inputs.empty()) {
      Error(grid_line_, "grid",
            absl::StrCat("sparse (X-MoD or MoE) runs at T = ", context,
                         " but no dense run there: each sparse run is "
                         "compared with the dense law at its own context (add dense jobs at T = ",
                         context, ")"));
      return;
    }
    bool ok = true;
    if (budgets.size() < 3) {
      Error(grid_line_, "grid.scale",
            absl::StrCat(where, " sees ", budgets.size(),
                         " model size(s); it needs at least 3 "
                         "scales to separate A/N^alpha from E"));
      ok = false;
    }
    if (inputs.size() < 6) {
      Error(budget_line_, "budget",
            absl::StrCat(where, " has ", inputs.size(),
                         " distinct (N, D) for its 5 parameters; "
                         "it needs at least 6 (more scales or budgets)"));
      ok = false;
    }
    // D proportional to a power of N (one tokens-per-parameter value, one FLOP
    // budget at every scale...): log D is affine in log N and alpha, beta cannot
    // be told apart, whatever the number of scales.
    if (inputs.size() >= 2 && budgets.size() >= 2) {
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      const double m = static_cast<double>(inputs.size());
      for (const auto& [n, d] : inputs) {
        const double x = std::log(n), y = std::log(d);
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
      }
      const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
      const double intercept = (sy - slope * sx) / m;
      double worst = 0.0;
      for (const auto& [n, d] : inputs) {
        worst = std::max(worst, std::abs(std::log(d) - intercept - slope * std::log(n)));
      }
      if (worst < 0.01) {
        Error(budget_line_, "budget",
              absl::StrFormat("%s: every dense run has D proportional to N^%.2f, so A/N^alpha and "
                              "B/D^beta are inseparable at any number of scales; give at least 3 "
                              "budgets per scale (e.g. tokens_per_param: [5, 20, 80]) or an "
                              "isoFLOP design (budget: flops: [C1, C2, C3])",
                              where, slope));
        ok = false;
      }
    }
    int three = 0;
    std::vector<std::string> short_scales;
    for (const auto& [n, ds] : budgets) {
      if (ds.size() >= 3) {
        ++three;
      } else {
        short_scales.push_back(
            absl::StrFormat("N=%.3g (%d budget%s)", n, ds.size(), ds.size() == 1 ? "" : "s"));
      }
    }
    if (ok && 2 * three < static_cast<int>(budgets.size())) {
      Error(
          budget_line_, "budget",
          absl::StrCat(where, ": only ", three, " of ", budgets.size(),
                       " scales have 3 or more token budgets; beta rests on too few D per scale"));
      ok = false;
    } else if (!short_scales.empty()) {
      Warn(budget_line_, "budget",
           absl::StrCat(where, ": fewer than 3 budgets at ", absl::StrJoin(short_scales, ", ")));
    }
    if (ok) {
      report_->notes.push_back(absl::StrFormat(
          "%s: %d scales, %d distinct (N, D), D/N from %.3g to %.3g: identifiable", where,
          budgets.size(), inputs.size(), MinRatio(inputs), MaxRatio(inputs)));
    }
  }

  static double MinRatio(const Inputs& in) {
    double r = INFINITY;
    for (const auto& [n, d] : in) r = std::min(r, d / n);
    return r;
  }
  static double MaxRatio(const Inputs& in) {
    double r = 0;
    for (const auto& [n, d] : in) r = std::max(r, d / n);
    return r;
  }

  void CheckExtras() {
    std::set<std::tuple<double, double, double, double, double>> inputs;
    std::set<int64_t> strides;
    std::set<double> routed_contexts;
    bool bigger = false;
    for (const ResolvedJob& j : jobs_) {
      if (j.file.shape.family != Family::kXmod) continue;
      const double cap =
          static_cast<double>(j.file.routed_tokens) / static_cast<double>(j.file.shape.context);
      inputs.insert({static_cast<double>(j.n_params_active), static_cast<double>(j.n_params_total),
                     static_cast<double>(j.tokens_trained()), cap,
                     static_cast<double>(j.file.shape.stride)});
      strides.insert(j.file.shape.stride);
      routed_contexts.insert(static_cast<double>(j.file.routed_tokens));
      bigger |= j.n_params_total != j.n_params_active;
    }
    if (inputs.empty()) {
      Error(grid_line_, "grid", "design.laws names xmod but the sweep has no X-MoD job");
      return;
    }
    if (!bigger) {
      Error(grid_line_, "grid",
            "every X-MoD job has N_total = N_active: eta cannot be fitted "
            "(use match: flops)");
    }
    if (inputs.size() < 6) {
      Error(grid_line_, "grid",
            absl::StrCat("the X-MoD law's 5 extras see ", inputs.size(),
                         " distinct sparse runs; give at least 6, or fit a reduced law with "
                         "xmod fit --fix (and --allow-unidentifiable here)"));
    }
    if (strides.size() < 2) {
      Warn(grid_line_, "grid.stride",
           "one anchor stride: psi (and c_s apart from the sparsity term) is not identifiable; "
           "fit with --fix psi=1");
    }
    if (routed_contexts.size() < 2) {
      Warn(grid_line_, "grid.context",
           "one routed context length (capacity x T): c_T and beta_T form a ridge; fit with "
           "--fix beta_T=0.5");
    }
    report_->notes.push_back(absl::StrCat("the X-MoD extras: ", inputs.size(),
                                          " distinct sparse runs, ", strides.size(), " strides, ",
                                          routed_contexts.size(), " routed context lengths"));
  }

  // The MoE law's four extras (docs/laws.md): MoE runs at two or more active sizes
  // and token budgets, more distinct (N, D, E/k) than extras, one granularity.
  void CheckMoeExtras() {
    std::set<std::tuple<double, double, double>> inputs;
    std::set<double> ns, ds, expansions;
    std::set<int64_t> granularities;
    for (const ResolvedJob& j : jobs_) {
      if (j.file.shape.family != Family::kMoe) continue;
      const ExpertShape& e = j.file.shape.experts;
      const double n = static_cast<double>(j.n_params_active);
      const double d = static_cast<double>(j.tokens_trained());
      const double expansion = double(e.experts) / double(std::max<int64_t>(1, e.top_k));
      granularities.insert(j.file.shape.d_ff / std::max<int64_t>(1, e.width));
      if (expansion <= 1.0) continue;  // all experts active: a dense point of the law
      inputs.insert({n, d, expansion});
      ns.insert(n);
      ds.insert(d);
      expansions.insert(expansion);
    }
    if (inputs.empty()) {
      Error(grid_line_, "grid",
            "design.laws names moe but the sweep has no MoE job with more experts than top_k "
            "(sparsity > 0)");
      return;
    }
    if (ns.size() < 2 || ds.size() < 2) {
      Error(grid_line_, "grid",
            absl::StrCat("the MoE law's extras need MoE runs at two or more active sizes and two "
                         "or more token budgets; these have ",
                         ns.size(), " and ", ds.size()));
    }
    if (inputs.size() < 5) {
      Error(grid_line_, "grid",
            absl::StrCat("the MoE law's 4 extras see ", inputs.size(),
                         " distinct MoE runs (N, D, E/k); give at least 5"));
    }
    if (expansions.size() < 2) {
      Warn(grid_line_, "grid.sparsity",
           "one expansion E/k above 1: the law's dependence on the expert count rests on that "
           "one value and the dense runs");
    }
    if (granularities.size() > 1) {
      Warn(grid_line_, "grid.granularity",
           "several granularities: the MoE law has no granularity term; xmod fit --law moe "
           "fits one at a time (--granularity G)");
    }
    report_->notes.push_back(absl::StrCat("the MoE extras: ", inputs.size(), " distinct MoE runs, ",
                                          ns.size(), " active sizes, ", expansions.size(),
                                          " expansions E/k"));
  }

  void CheckReplicates() {
    std::map<std::string, int> replicates;
    for (const ResolvedJob& j : jobs_) {
      nlohmann::json c = j.CanonicalConfig();
      c.erase("seed");
      ++replicates[c.dump()];
    }
    int with_seeds = 0;
    for (const auto& [config, n] : replicates) with_seeds += n >= 2;
    if (with_seeds == 0) {
      Warn(grid_line_, "grid.seed",
           "no configuration has two seeds: seed-to-seed noise (1-3% of the loss at tiny scale) "
           "cannot be measured; add a seed axis (grid.seed: [1, 2]) where effects are small");
    }
  }

  void CheckJobs() {
    int flop_errors = 0, layout_errors = 0, aspect = 0;
    for (const ResolvedJob& j : jobs_) {
      const ModelShape& s = j.file.shape;
      const std::string what = absl::StrFormat(
          "%s at scale %s, T = %d, sparsity %g, stride %d (%d layers)", FamilyName(s.family),
          j.scale, s.context, j.sparsity, s.stride, s.n_layers);
      if (s.family != Family::kDense && j.match == MatchMode::kFlops &&
          std::abs(j.flops_ratio() - 1.0) > spec_.design.flop_tolerance) {
        if (flop_errors++ < 8) {
          Error(ScaleLine(spec_, j.scale), absl::StrCat("scales.", j.scale),
                absl::StrFormat("%s has %.3f x the dense FLOPs per token, outside the tolerance "
                                "%.3g (design.flop_tolerance): integer layer counts cannot match; "
                                "use a deeper dense scale (n_layers >= 4)",
                                what, j.flops_ratio(), spec_.design.flop_tolerance));
        }
      }
      if (s.family != Family::kDense && s.n_layers < s.stride + 1) {
        if (layout_errors++ < 8) {
          Error(ScaleLine(spec_, j.scale), absl::StrCat("scales.", j.scale),
                absl::StrCat(what, ": no full stride period (an anchor, ", s.stride - 1,
                             " routed layers and the next anchor need ", s.stride + 1,
                             " layers); the stride is not what this job tests"));
        }
      }
      if (static_cast<double>(s.d_model) / static_cast<double>(s.n_layers) < 8.0) {
        const size_t before = report_->findings.size();
        if (aspect < 4) {
          Warn(ScaleLine(spec_, j.scale), absl::StrCat("scales.", j.scale),
               absl::StrFormat("%s: d_model/layers = %.1f, a very deep and narrow model; depth "
                               "and width are confounded with sparsity here",
                               what, static_cast<double>(s.d_model) / s.n_layers));
        }
        if (report_->findings.size() > before || aspect >= 4) ++aspect;
      }
    }
    auto more = [&](int count, int shown, const char* what) {
      if (count > shown) {
        report_->findings.push_back(
            {true, grid_line_, "grid", absl::StrCat(count - shown, " more jobs ", what)});
      }
    };
    more(flop_errors, 8, "outside the FLOP tolerance");
    more(layout_errors, 8, "without a full stride period");
    if (aspect > 4) Warn(grid_line_, "grid", absl::StrCat(aspect - 4, " more very deep jobs"));
  }

  const SweepSpec& spec_;
  const std::vector<ResolvedJob>& jobs_;
  DesignReport* report_;
  int grid_line_ = 1;
  int budget_line_ = 1;
};

}  // namespace

bool DesignReport::ok() const {
  return std::none_of(findings.begin(), findings.end(),
                      [](const DesignFinding& f) { return f.error; });
}

std::string DesignReport::Text(const std::string& source) const {
  std::string out;
  for (bool errors : {true, false}) {
    for (const DesignFinding& f : findings) {
      if (f.error != errors) continue;
      absl::StrAppend(&out, source, ":", f.line, ": ", f.field, ": ",
                      f.error ? "" : "warning: ", f.message, "\n");
    }
  }
  for (const std::string& n : notes) absl::StrAppend(&out, "design: ", n, "\n");
  return out;
}

DesignReport CheckDesign(const SweepSpec& spec, const std::vector<ResolvedJob>& all) {
  // A cooldown trunk is never a law point (docs/schedules.md): the design is
  // judged on the points the laws will read.
  std::vector<ResolvedJob> jobs;
  for (const ResolvedJob& j : all) {
    if (j.file.keep_steps.empty()) jobs.push_back(j);
  }
  DesignReport report;
  Checker(spec, jobs, &report).Run();
  return report;
}

absl::Status DesignStatus(const DesignReport& report, const std::string& source, bool allow) {
  if (report.ok() || allow) return absl::OkStatus();
  std::string errors;
  for (const DesignFinding& f : report.findings) {
    if (f.error)
      absl::StrAppend(&errors, source, ":", f.line, ": ", f.field, ": ", f.message, "\n");
  }
  absl::StrAppend(&errors, "design check failed for the laws [", absl::StrJoin(report.laws, ", "),
                  "] (see docs/design-checks.md); fix the sweep, name fewer laws in "
                  "design.laws, or pass --allow-unidentifiable");
  return absl::InvalidArgumentError(errors);
}

}  // namespace xmod
