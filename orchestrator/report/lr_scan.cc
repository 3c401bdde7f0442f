// The lr scan (train.lr_scan; docs/design-checks.md, "An lr axis at the smallest
// scales"): the runs the laws and comparisons read are those at the family's best
// lr factor at each scale when its scan covered every scale it ran, else those at
// the sweep's own lr everywhere (one protocol).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/family.h"
#include "common/stats.h"
#include "orchestrator/report/report.h"

namespace xmod {

namespace {

// A succeeded run's place in the scan: its factor and its configuration without
// the lr (what its siblings at other factors share).
struct ScanPlace {
  double factor = 1.0;
  std::string siblings;
};

ScanPlace Place(const JobResultRow& j) {
  ScanPlace p;
  nlohmann::json config = nlohmann::json::parse(j.config_key, nullptr, false);
  if (!config.is_object()) {
    p.siblings = j.config_key;
    return p;
  }
  if (config.contains("lr_factor") && config["lr_factor"].is_number()) {
    p.factor = config["lr_factor"].get<double>();
  }
  for (const char* key : {"lr", "min_lr", "lr_factor"}) config.erase(key);
  p.siblings = config.dump();
  return p;
}

struct Scan {
  std::vector<LrScanChoice> choices;
  // (family, scale) -> chosen factor
  std::map<std::pair<std::string, std::string>, double> best;
  // run id -> its place
  std::map<std::string, ScanPlace> places;
  // sibling key -> factors with a finished run
  std::map<std::string, std::set<double>> finished;
};

// One lr protocol per family: its best factors apply only where its scan covers
// every scale it has finished runs at; otherwise it is read at the sweep's own lr
// (factor 1) at every scale.
template <typename Cells>
void OneProtocol(const Cells& cells, Scan* s) {
  for (LrScanChoice& c : s->choices) {
    for (const auto& [where, groups] : cells) {
      if (where.first != c.family) continue;
      bool covered = false;
      for (const LrScanChoice& other : s->choices) {
        covered |= other.family == c.family && other.scale == where.second && other.complete;
      }
      if (!covered) c.unscanned.push_back(where.second);
    }
    c.applied = c.complete && c.unscanned.empty();
    if (!c.applied) s->best[{c.family, c.scale}] = 1.0;
  }
}

Scan Analyse(const std::vector<JobResultRow>& jobs) {
  Scan s;
  // (family, scale) -> sibling key -> factor -> losses
  std::map<std::pair<std::string, std::string>,
           std::map<std::string, std::map<double, std::vector<double>>>>
      cells;
  for (const JobResultRow& j : jobs) {
    const std::optional<double> loss = j.Loss("auto");
    if (j.state != JobState::kSucceeded || !loss.has_value() || j.role == JobRole::kTrunk) continue;
    const ScanPlace p = Place(j);
    s.places[j.id] = p;
    s.finished[p.siblings].insert(p.factor);
    cells[{std::string(FamilyName(j.family)), j.scale}][p.siblings][p.factor].push_back(*loss);
  }
  for (const auto& [where, groups] : cells) {
    // The configurations that scanned, and the factors every one of them finished.
    std::set<double> common;
    int scanned = 0;
    for (const auto& [siblings, by_factor] : groups) {
      if (by_factor.size() < 2) continue;
      std::set<double> factors;
      for (const auto& [factor, losses] : by_factor) factors.insert(factor);
      if (scanned++ == 0) {
        common = factors;
      } else {
        std::set<double> both;
        for (double f : factors) {
          if (common.count(f) > 0) both.insert(f);
        }
        common = both;
      }
    }
    if (scanned == 0) continue;
    LrScanChoice c;
    c.family = where.first;
    c.scale = where.second;
    c.configurations = scanned;
    c.factor = 1.0;
    double lowest = std::numeric_limits<double>::infinity();
    for (double f : common) {
      std::vector<double> means;
      for (const auto& [siblings, by_factor] : groups) {
        if (by_factor.size() >= 2) means.push_back(Mean(by_factor.at(f)));
      }
      c.mean_loss[f] = Mean(means);
      if (c.mean_loss[f] < lowest) {
        lowest = c.mean_loss[f];
        c.factor = f;
      }
    }
    c.complete = common.size() >= 2;
    if (!c.complete) c.factor = 1.0;  // no two factors finished everywhere: the sweep's own lr
    s.best[where] = c.factor;
    s.choices.push_back(std::move(c));
  }
  OneProtocol(cells, &s);
  return s;
}

}  // namespace

std::vector<JobResultRow> BestLrRuns(const std::vector<JobResultRow>& jobs,
                                     std::vector<LrScanChoice>* choices) {
  if (choices != nullptr) choices->clear();
  bool any = false;
  for (const JobResultRow& j : jobs) any |= j.config_key.find("\"lr_factor\"") != std::string::npos;
  if (!any) return jobs;
  const Scan s = Analyse(jobs);
  if (choices != nullptr) *choices = s.choices;
  std::vector<JobResultRow> out;
  for (const JobResultRow& j : jobs) {
    const auto place = s.places.find(j.id);
    if (place == s.places.end()) {
      // Not a finished run: kept only outside the scan (its factor cannot be read
      // cheaply here and it carries no loss for the laws).
      if (j.config_key.find("\"lr_factor\"") == std::string::npos) out.push_back(j);
      continue;
    }
    const auto best = s.best.find({std::string(FamilyName(j.family)), j.scale});
    if (best == s.best.end()) {
      // No configuration of its family scanned at this scale (or the selection
      // already ran): nothing to choose between.
      out.push_back(j);
      continue;
    }
    // The factor this run's configuration is read at: the family's best where the
    // configuration finished a run there, else the sweep's own lr (factor 1).
    double factor = 1.0;
    if (s.finished.at(place->second.siblings).count(best->second) > 0) factor = best->second;
    if (place->second.factor == factor) out.push_back(j);
  }
  return out;
}

QueryResult LrScanTable(const std::vector<JobResultRow>& jobs) {
  std::vector<LrScanChoice> choices;
  BestLrRuns(jobs, &choices);
  QueryResult t;
  t.columns = {"family", "scale", "lr_factor", "mean_loss", "configurations", "chosen"};
  for (const LrScanChoice& c : choices) {
    for (const auto& [factor, loss] : c.mean_loss) {
      std::string mark;
      if (factor == c.factor && c.complete) mark = c.applied ? "best (read)" : "best";
      if (factor == 1.0 && !c.applied) mark += mark.empty() ? "read" : ", read";
      t.rows.push_back(
          {c.family, c.scale, factor, loss, static_cast<int64_t>(c.configurations), mark});
    }
    if (!c.complete) {
      t.rows.push_back({c.family, c.scale, Value(), Value(), static_cast<int64_t>(c.configurations),
                        std::string("incomplete: the sweep's own lr is used")});
    } else if (!c.applied) {
      t.rows.push_back(
          {c.family, c.scale, Value(), Value(), static_cast<int64_t>(c.configurations),
           fmt::format("not scanned at {}: {} is read at the sweep's own lr at every scale "
                       "(one protocol)",
                       fmt::join(c.unscanned, ", "), c.family)});
    }
  }
  return t;
}

}  // namespace xmod
