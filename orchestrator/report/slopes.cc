#include "orchestrator/report/slopes.h"

#include <fmt/format.h>

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <map>
#include <tuple>

#include "orchestrator/report/report.h"

namespace xmod {

namespace {

// A finished run's loss (the metric its laws read) by seed.
using BySeed = std::map<int64_t, double>;

struct Cell {
  double x = 0.0;  // D (tokens trained) or N (active parameters) of the cell
  BySeed loss;
};

// The configuration without scale, budget and seed, as people read it.
std::string ConfigName(const JobResultRow& j) {
  if (!j.routed()) return "dense";
  return FamilyLabel(j.family, {j.capacity, j.stride, j.experts, j.top_k, j.sparsity});
}

std::string BudgetName(const JobResultRow& j) {
  if (j.budget_kind == "tokens_per_param") return fmt::format("D/N = {:g}", j.budget_value);
  if (j.budget_kind == "flops") return fmt::format("C = {:g}", j.budget_value);
  return fmt::format("D = {:g}", j.budget_value);
}

// Slopes between neighbouring cells (sorted by x), one row each.
void AddSlopes(const std::string& config, int64_t context, const std::string& along,
               const std::string& at, const std::map<double, Cell>& cells, QueryResult* t) {
  const Cell* previous = nullptr;
  for (const auto& [x, cell] : cells) {
    if (previous != nullptr) {
      std::vector<double> slopes;
      for (const auto& [seed, loss] : cell.loss) {
        const auto other = previous->loss.find(seed);
        if (other == previous->loss.end()) continue;
        slopes.push_back((std::log(loss) - std::log(other->second)) /
                         (std::log(cell.x) - std::log(previous->x)));
      }
      if (!slopes.empty()) {
        double mean = 0.0;
        for (double s : slopes) mean += s;
        mean /= static_cast<double>(slopes.size());
        Value low, high;
        if (slopes.size() >= 2) {
          double squares = 0.0;
          for (double s : slopes) squares += (s - mean) * (s - mean);
          const double k = static_cast<double>(slopes.size());
          const double se = std::sqrt(squares / (k - 1.0) / k);
          const boost::math::students_t dist(k - 1.0);
          const double q = boost::math::quantile(boost::math::complement(dist, 0.025));
          low = mean - q * se;
          high = mean + q * se;
        }
        t->rows.push_back({config, context, along, at, previous->x, cell.x, mean, low, high,
                           static_cast<int64_t>(slopes.size())});
      }
    }
    previous = &cell;
  }
}

}  // namespace

QueryResult LocalSlopes(const std::vector<JobResultRow>& all) {
  const std::vector<JobResultRow> jobs = BestLrRuns(all);
  // (config, context, budget kind) → scale → D → cell; and → budget → N → cell.
  using Key = std::tuple<std::string, int64_t, std::string>;
  std::map<Key, std::map<std::string, std::map<double, Cell>>> along_d;
  std::map<Key, std::map<std::string, std::map<double, Cell>>> along_n;
  for (const JobResultRow& j : jobs) {
    const std::optional<double> loss = j.Loss("auto");
    if (j.state != JobState::kSucceeded || j.role == JobRole::kTrunk || !loss.has_value() ||
        !(*loss > 0)) {
      continue;
    }
    const Key key{ConfigName(j), j.context, j.budget_kind};
    const double d = static_cast<double>(j.tokens_trained > 0 ? j.tokens_trained : j.tokens);
    const double n = j.n_active;
    if (d > 0) {
      Cell& c = along_d[key][j.scale][d];
      c.x = d;
      c.loss[j.seed] = *loss;
    }
    if (n > 0) {
      Cell& c = along_n[key][BudgetName(j)][n];
      c.x = n;
      c.loss[j.seed] = *loss;
    }
  }
  QueryResult t;
  t.columns = {"config", "context", "along", "at",     "from",
               "to",     "slope",   "low95", "high95", "seeds"};
  for (const auto& [key, scales] : along_d) {
    for (const auto& [scale, cells] : scales) {
      AddSlopes(std::get<0>(key), std::get<1>(key), "D", "scale " + scale, cells, &t);
    }
  }
  for (const auto& [key, budgets] : along_n) {
    for (const auto& [budget, cells] : budgets) {
      AddSlopes(std::get<0>(key), std::get<1>(key), "N", budget, cells, &t);
    }
  }
  return t;
}

}  // namespace xmod
