#include "orchestrator/sweep/design_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "orchestrator/fit/dense_law.h"
#include "orchestrator/fit/law_registry.h"

namespace xmod {

LawPoint PlannedPoint(const ResolvedJob& j) {
  LawPoint x;
  x.id = j.file.id;
  x.family = std::string(FamilyName(j.file.shape.family));
  x.n = static_cast<double>(j.n_params_active);
  x.n_total = static_cast<double>(j.n_params_total);
  x.d = static_cast<double>(j.tokens_trained());
  x.context = static_cast<double>(j.file.shape.context);
  x.capacity =
      static_cast<double>(j.file.routed_tokens) / static_cast<double>(j.file.shape.context);
  x.stride = static_cast<double>(j.file.shape.stride);
  x.layers = static_cast<double>(j.file.shape.n_layers);
  if (j.file.shape.family == Family::kGdn) x.deltanet_share = j.sparsity;
  const MolShape& m = j.file.shape.mol;
  if (Traits(j.file.shape.family).routing == RoutingKind::kLayers && m.top_k > 0) {
    x.block_expansion = static_cast<double>(m.blocks - m.shared) / static_cast<double>(m.top_k);
  }
  const ExpertShape& e = j.file.shape.experts;
  if (e.experts > 0) {
    x.extra["granularity"] = static_cast<double>(j.file.shape.d_ff / std::max<int64_t>(1, e.width));
    if (e.top_k > 0) x.expansion = static_cast<double>(e.experts) / static_cast<double>(e.top_k);
  }
  return x;
}

namespace {

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
    report_->laws = SweepLaws(spec_);
    std::vector<const LawSpec*> laws;  // the named laws, in the registry's order
    for (const LawSpec& law : Laws()) {
      if (std::count(report_->laws.begin(), report_->laws.end(), law.name) > 0) {
        laws.push_back(&law);
      }
    }
    std::vector<LawPoint> planned;
    for (const ResolvedJob& j : jobs_) planned.push_back(Planned(j));
    // Contexts at which a dense law must be fitted: those of every run a law
    // built on the dense law reads.
    std::set<int64_t> contexts;
    bool dense_based = false;
    for (const LawSpec* law : laws) {
      if (law->dense_parameters == 0) continue;
      dense_based = true;
      for (const LawPoint& x : planned) {
        const bool family = std::count(law->families.begin(), law->families.end(), x.family) > 0;
        if (family && law->reads(x)) contexts.insert(static_cast<int64_t>(x.context));
      }
    }
    Sink sink(this);
    if (dense_based) {
      if (contexts.empty()) {
        Error(grid_line_, "grid",
              "the sweep has no dense jobs, so no dense law can be fitted "
              "(add a dense block or baselines: [dense])");
      }
      for (int64_t t : contexts) DenseLaw::CheckDesignAt(planned, static_cast<double>(t), &sink);
    }
    for (const LawSpec* law : laws) law->check_design(planned, &sink);
    if (!laws.empty()) CheckReplicates();
    CheckJobs();
    NoteComputePairs();
    CheckComputeRuleRange();
  }

 private:
  // The laws' findings, on the sweep file's lines: the budget's for "budget",
  // the grid's for the rest.
  class Sink : public DesignSink {
   public:
    explicit Sink(Checker* checker) : checker_(checker) {}
    void Error(const std::string& field, const std::string& message) override {
      checker_->Error(Line(field), field, message);
    }
    void Warn(const std::string& field, const std::string& message) override {
      checker_->Warn(Line(field), field, message);
    }
    void Note(const std::string& message) override { checker_->report_->notes.push_back(message); }

   private:
    int Line(const std::string& field) const {
      return field == "budget" ? checker_->budget_line_ : checker_->grid_line_;
    }
    Checker* checker_;
  };

  // A planned job as the laws see it, before it has a loss: N, N_total, D the
  // tokens it will train, its context, capacity k/T and stride, and for a
  // token-choice expert model its expansion E/k and granularity d_ff/d_e.
  static LawPoint Planned(const ResolvedJob& j) { return PlannedPoint(j); }

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

  // The compute rule of `lr: auto` and `batch_tokens: auto` was fitted by DeepSeek
  // LLM on runs from 1e17 FLOPs up (docs/design-checks.md); below that its lr and
  // batch are an extrapolation, which the check says with the distance.
  void CheckComputeRuleRange() {
    const TrainSpec& t = spec_.train;
    if (!t.lr_auto && !t.batch_auto) return;
    double lowest = std::numeric_limits<double>::infinity(), highest = 0.0;
    for (const ResolvedJob& j : jobs_) {
      const double c = RuleCompute(DenseReference(j.file.shape, j.dense_layers),
                                   j.rule_tokens > 0 ? j.rule_tokens : j.file.tokens);
      lowest = std::min(lowest, c);
      highest = std::max(highest, c);
    }
    if (!(lowest < kRuleFittedFrom)) return;
    const std::string field = t.lr_auto ? "train.lr" : "train.batch_tokens";
    Warn(spec_.LineOf(field, 1), field,
         absl::StrFormat(
             "auto: the compute rule is applied at C = %.2g-%.2g FLOPs, %.1f decades below the "
             "%.0e FLOPs its fit starts at (DeepSeek LLM, arXiv:2401.02954, section 3.1): its lr "
             "and batch are extrapolated there; give lr (and batch_tokens) per scale, or scan "
             "a few lr values at the smallest scales (train.lr_scan)",
             lowest, highest, std::log10(kRuleFittedFrom / lowest), kRuleFittedFrom));
  }

  // How well each sparse job's training compute matches its dense partner's (the
  // dense job at the same scale, context, budget and seed): a relative
  // comparison of the two compares these FLOPs. Sparse budgets are tokens per
  // active parameter, so the pair can differ; the note gives the largest
  // mismatch and how many pairs are more than 1% and 5% apart (docs/design-checks.md).
  void NoteComputePairs() {
    std::map<std::tuple<std::string, int64_t, int, double, uint64_t>, const ResolvedJob*> dense;
    for (const ResolvedJob& j : jobs_) {
      if (j.file.is_trunk() || !IsDenseRun(j.file.shape.family, j.file.shape.stride)) continue;
      dense[{j.scale, j.file.shape.context, static_cast<int>(j.budget_kind), j.budget_value,
             j.file.seed}] = &j;
    }
    int pairs = 0, over_1 = 0, over_5 = 0;
    double worst = 0.0;
    const ResolvedJob* worst_job = nullptr;
    const ResolvedJob* worst_dense = nullptr;
    for (const ResolvedJob& j : jobs_) {
      if (j.file.is_trunk() || IsDenseRun(j.file.shape.family, j.file.shape.stride)) continue;
      const auto it = dense.find({j.scale, j.file.shape.context, static_cast<int>(j.budget_kind),
                                  j.budget_value, j.file.seed});
      if (it == dense.end() || !(it->second->standalone_flops() > 0)) continue;
      ++pairs;
      const double mismatch = j.standalone_flops() / it->second->standalone_flops() - 1.0;
      over_1 += std::abs(mismatch) > 0.01;
      over_5 += std::abs(mismatch) > 0.05;
      if (worst_job == nullptr || std::abs(mismatch) > std::abs(worst)) {
        worst = mismatch;
        worst_job = &j;
        worst_dense = it->second;
      }
    }
    if (pairs == 0) return;
    report_->notes.push_back(absl::StrFormat(
        "compute-matched pairs: %d sparse job(s) beside a dense job of the same scale, context, "
        "budget and seed; training FLOPs differ by more than 1%% in %d and more than 5%% in %d; "
        "largest: %+.1f%% (%s %s against dense %s)",
        pairs, over_1, over_5, 100.0 * worst, FamilyName(worst_job->file.shape.family),
        worst_job->file.id, worst_dense->file.id));
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
      if (Traits(s.family).routing != RoutingKind::kNone && j.match == MatchMode::kFlops &&
          std::abs(j.flops_ratio() - 1.0) > spec_.design.flop_tolerance) {
        if (flop_errors++ < 8) {
          Error(ScaleLine(spec_, j.scale), absl::StrCat("scales.", j.scale),
                absl::StrFormat("%s has %.3f x the dense FLOPs per token, outside the tolerance "
                                "%.3g (design.flop_tolerance): integer layer counts cannot match; "
                                "use a deeper dense scale (n_layers >= 4)",
                                what, j.flops_ratio(), spec_.design.flop_tolerance));
        }
      }
      if (Traits(s.family).routing == RoutingKind::kDepth && s.n_layers < s.stride + 1) {
        if (layout_errors++ < 8) {
          Error(ScaleLine(spec_, j.scale), absl::StrCat("scales.", j.scale),
                absl::StrCat(what, ": no full stride period (an anchor, ", s.stride - 1,
                             " routed layers and the next anchor need ", s.stride + 1,
                             " layers); the stride is not what this job tests"));
        }
      }
      // A mol stage is a few thin blocks, a fraction of a dense layer: its depth is
      // the design, not an accident of sizing.
      if (Traits(s.family).routing != RoutingKind::kLayers &&
          static_cast<double>(s.d_model) / static_cast<double>(s.n_layers) < 8.0) {
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

std::vector<std::string> SweepLaws(const SweepSpec& spec) {
  if (spec.design.laws_given) return spec.design.laws;
  SweepFamilies families;
  for (const GridBlock& b : spec.Blocks()) {
    families.blocks.insert(std::string(FamilyName(b.family)));
    for (Family f : b.baselines) families.baselines.insert(std::string(FamilyName(f)));
    for (int64_t t : b.context) families.contexts.insert(static_cast<double>(t));
  }
  return DefaultLaws(families);
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
