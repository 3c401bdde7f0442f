#include "orchestrator/report/compare.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace xmod {
namespace {

using Flat = std::map<std::string, std::string>;  // JSON pointer -> value as JSON text

Flat Flatten(const std::string& config_key) {
  Flat out;
  const nlohmann::json j = nlohmann::json::parse(config_key, nullptr, false);
  if (!j.is_object()) return out;
  const nlohmann::json flat = j.flatten();
  for (const auto& [key, value] : flat.items()) out[key] = value.dump();
  return out;
}

struct Side {
  std::vector<const JobResultRow*> jobs;
  std::vector<Flat> configs;
};

Side Usable(const std::vector<JobResultRow>& rows) {
  Side s;
  for (const JobResultRow& j : rows) {
    if (j.state != JobState::kSucceeded || j.role == JobRole::kTrunk) continue;
    if (!j.Loss("auto").has_value()) continue;
    s.jobs.push_back(&j);
    s.configs.push_back(Flatten(j.config_key));
  }
  return s;
}

// "/train/lr" -> "train.lr".
std::string Dotted(const std::string& pointer) {
  std::string out = pointer.substr(pointer.empty() ? 0 : 1);
  for (char& c : out) c = c == '/' ? '.' : c;
  return out;
}

struct Group {
  const JobResultRow* first = nullptr;
  std::vector<double> losses, ses;
};

// Mean, and the standard error of the mean: from the seeds when there are two
// or more, else the one run's evaluation SE (0 when unknown). `from_seeds` says which.
void Summarise(const Group& g, double* mean, double* se, bool* from_seeds) {
  const double n = static_cast<double>(g.losses.size());
  *mean = 0;
  for (double v : g.losses) *mean += v / n;
  *from_seeds = g.losses.size() >= 2;
  if (*from_seeds) {
    double squares = 0;
    for (double v : g.losses) squares += (v - *mean) * (v - *mean);
    *se = std::sqrt(squares / (n - 1) / n);
  } else {
    *se = g.ses.empty() ? 0.0 : g.ses.front();
  }
}

}  // namespace

SweepComparison CompareSweeps(const std::vector<JobResultRow>& a,
                              const std::vector<JobResultRow>& b) {
  SweepComparison out;
  const Side sa = Usable(a), sb = Usable(b);
  // Settings constant within each sweep but different between them.
  std::set<std::string> keys;
  for (const Side* s : {&sa, &sb}) {
    for (const Flat& f : s->configs) {
      for (const auto& [k, v] : f) keys.insert(k);
    }
  }
  std::set<std::string> differing;
  for (const std::string& k : keys) {
    std::set<std::string> va, vb;
    for (const Flat& f : sa.configs) va.insert(f.count(k) ? f.at(k) : "(none)");
    for (const Flat& f : sb.configs) vb.insert(f.count(k) ? f.at(k) : "(none)");
    if (va.size() == 1 && vb.size() == 1 && va != vb) {
      differing.insert(k);
      out.differences.push_back(fmt::format("{}: {} -> {}", Dotted(k), *va.begin(), *vb.begin()));
    }
  }
  auto match_key = [&](const Flat& f) {
    nlohmann::json key = nlohmann::json::object();
    for (const auto& [k, v] : f) {
      if (!differing.count(k)) key[k] = v;
    }
    return key.dump();
  };
  std::map<std::string, Group> ga, gb;
  std::vector<std::string> order;
  for (const auto& [side, groups] : {std::pair{&sa, &ga}, std::pair{&sb, &gb}}) {
    for (size_t i = 0; i < side->jobs.size(); ++i) {
      const JobResultRow& j = *side->jobs[i];
      const std::string key = match_key(side->configs[i]);
      Group& g = (*groups)[key];
      if (g.first == nullptr) {
        g.first = &j;
        if (groups == &ga) order.push_back(key);
      }
      g.losses.push_back(*j.Loss("auto"));
      const std::optional<double> se =
          j.causal_metric() ? j.final_val_loss_causal_se : j.final_val_loss_se;
      if (se.has_value()) g.ses.push_back(*se);
    }
  }
  out.table.columns = {"family",      "scale",        "sparsity", "stride", "context",
                       "budget_kind", "budget_value", "seeds_a",  "loss_a", "seeds_b",
                       "loss_b",      "diff",         "diff_se",  "z",      "se_from"};
  std::vector<double> diffs;
  for (const std::string& key : order) {
    const auto other = gb.find(key);
    if (other == gb.end()) continue;
    const Group& x = ga[key];
    const Group& y = other->second;
    double mean_a, se_a, mean_b, se_b;
    bool seeds_a, seeds_b;
    Summarise(x, &mean_a, &se_a, &seeds_a);
    Summarise(y, &mean_b, &se_b, &seeds_b);
    const double diff = mean_b - mean_a;
    const double se = std::sqrt(se_a * se_a + se_b * se_b);
    const JobResultRow& j = *x.first;
    out.table.rows.push_back(
        {std::string(FamilyName(j.family)), j.scale, j.sparsity, j.stride, j.context, j.budget_kind,
         j.budget_value, static_cast<int64_t>(x.losses.size()), mean_a,
         static_cast<int64_t>(y.losses.size()), mean_b, diff, se > 0 ? Value(se) : Value(),
         se > 0 ? Value(diff / se) : Value(), std::string(seeds_a && seeds_b ? "seeds" : "eval")});
    diffs.push_back(diff);
    out.b_lower += diff < 0 ? 1 : 0;
  }
  out.shared = static_cast<int64_t>(diffs.size());
  out.only_a = static_cast<int64_t>(ga.size()) - out.shared;
  out.only_b = static_cast<int64_t>(gb.size()) - out.shared;
  if (!diffs.empty()) {
    const double n = static_cast<double>(diffs.size());
    for (double d : diffs) out.mean_diff += d / n;
    if (diffs.size() >= 2) {
      double squares = 0;
      for (double d : diffs) squares += (d - out.mean_diff) * (d - out.mean_diff);
      out.mean_diff_se = std::sqrt(squares / (n - 1) / n);
    }
  }
  return out;
}

}  // namespace xmod
