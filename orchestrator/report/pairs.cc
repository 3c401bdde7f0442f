// Compute-matched paired differences (docs/design-checks.md, "Compute-matched
// pairs"): each sparse configuration beside the dense runs of its scale, context
// and budget, with a seed error bar, what the two share and what they do not.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/family.h"
#include "common/stats.h"
#include "orchestrator/report/report.h"

namespace xmod {

namespace {

struct Group {
  const JobResultRow* first = nullptr;
  std::vector<double> losses;
  double train_flops = 0.0;  // summed over its jobs
  double capacity_causal = 0.0;
  int with_capacity = 0;
  int jobs = 0;
};

// What a family's sparsity counts.
std::string SparsityKind(const JobResultRow& j) {
  if (j.experts_family()) return "idle experts (1 - k/E)";
  if (j.routed()) return "skipped tokens (1 - capacity)";
  return "-";
}

// The seed noise, pooled over every configuration with two or more seeds (0:
// none has).
double PooledSd(const std::map<std::string, Group>& groups) {
  double pooled = 0.0;
  int df = 0;
  for (const auto& [key, g] : groups) {
    if (g.losses.size() < 2) continue;
    const double m = Mean(g.losses);
    for (double v : g.losses) pooled += (v - m) * (v - m);
    df += static_cast<int>(g.losses.size()) - 1;
  }
  return df > 0 ? std::sqrt(pooled / df) : 0.0;
}

}  // namespace

QueryResult PairedDifferences(const std::vector<JobResultRow>& all) {
  const std::vector<JobResultRow> jobs = BestLrRuns(all);
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const JobResultRow& j : jobs) {
    const std::optional<double> loss = j.Loss("auto");
    if (j.state != JobState::kSucceeded || !loss.has_value()) continue;
    const std::string key = j.config_key.empty() ? j.id : j.config_key;
    Group& g = groups[key];
    if (g.first == nullptr) {
      g.first = &j;
      order.push_back(key);
    }
    g.losses.push_back(*loss);
    g.train_flops += j.train_flops;
    ++g.jobs;
    const std::optional<double> realised =
        j.causal_metric() ? j.final_capacity_causal : j.final_capacity;
    if (realised.has_value()) {
      g.capacity_causal += *realised;
      ++g.with_capacity;
    }
  }
  const double sd = PooledSd(groups);
  QueryResult t;
  t.columns = {"family",       "scale",
               "context",      "budget",
               "sparsity",     "sparsity_kind",
               "stride",       "experts",
               "seeds",        "dense_seeds",
               "loss",         "dense_loss",
               "difference",   "diff_pct",
               "diff_se",      "low_95",
               "high_95",      "flops_ratio",
               "matched",      "params_ratio",
               "capacity",     "capacity_realised",
               "capacity_flag"};
  for (const std::string& key : order) {
    const Group& g = groups.at(key);
    const JobResultRow& j = *g.first;
    if (!j.routed()) continue;
    const Group* dense = nullptr;
    for (const std::string& other : order) {
      const JobResultRow& d = *groups.at(other).first;
      if (!d.routed() && d.experts == 0 && d.scale == j.scale && d.context == j.context &&
          d.budget_kind == j.budget_kind && d.budget_value == j.budget_value) {
        dense = &groups.at(other);
        break;
      }
    }
    if (dense == nullptr) continue;
    const double loss = Mean(g.losses), dense_loss = Mean(dense->losses);
    const double difference = loss - dense_loss;
    const double se = sd * std::sqrt(1.0 / g.losses.size() + 1.0 / dense->losses.size());
    const double flops = g.train_flops / g.jobs, dense_flops = dense->train_flops / dense->jobs;
    const double flops_ratio = dense_flops > 0 ? flops / dense_flops : 0.0;
    const double realised = g.with_capacity > 0 ? g.capacity_causal / g.with_capacity : 0.0;
    std::vector<Value> row = {
        std::string(FamilyName(j.family)),
        j.scale,
        j.context,
        fmt::format("{} {:g}", j.budget_kind, j.budget_value),
        j.sparsity,
        SparsityKind(j),
        j.experts_family() ? Value() : Value(j.stride),
        j.experts_family() || Traits(j.family).routing == RoutingKind::kLayers
            ? Value(fmt::format("{} top-{}", j.experts, j.top_k))
            : Value(),
        static_cast<int64_t>(g.losses.size()),
        static_cast<int64_t>(dense->losses.size()),
        loss,
        dense_loss,
        difference,
        100.0 * difference / dense_loss,
        sd > 0 ? Value(se) : Value(),
        sd > 0 ? Value(difference - 1.96 * se) : Value(),
        sd > 0 ? Value(difference + 1.96 * se) : Value(),
        flops_ratio,
        std::abs(flops_ratio - 1.0) <= 0.01
            ? std::string("training FLOPs")
            : fmt::format("FLOPs/token only ({:+.1f}% total)", 100.0 * (flops_ratio - 1.0)),
        dense->first->n_total > 0 ? Value(j.n_total / dense->first->n_total) : Value(),
        j.experts_family() ? Value() : Value(j.capacity),
        g.with_capacity > 0 && !j.experts_family() ? Value(realised) : Value(),
        !j.experts_family() && g.with_capacity > 0 && realised > 1.05 * j.capacity
            ? Value(fmt::format("realised {:.1f}% above nominal",
                                100.0 * (realised / j.capacity - 1)))
            : Value(std::string())};
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace xmod
