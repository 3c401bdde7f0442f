#include "orchestrator/plan/cluster.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xmod {

namespace {

int Line(const YAML::Node& node) { return node.Mark().line + 1; }

// Reads one mapping's keys into doubles, refusing unknown keys, duplicates and
// values that are not positive numbers (or, where allowed, zero).
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  void Error(int line, const std::string& field, const std::string& what) {
    errors_.push_back(absl::StrCat(source_, ":", std::max(line, 1), ": ", field, ": ", what));
  }

  void Keys(const YAML::Node& map, const std::string& prefix,
            const std::vector<std::string>& allowed) {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string field = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (!seen.insert(key).second) {
        Error(Line(it->first), field, "duplicate key");
      } else if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        Error(Line(it->first), field,
              absl::StrCat("unknown key '", key, "' (known: ", absl::StrJoin(allowed, ", "), ")"));
      }
    }
  }

  // A number at map[key]; `required` refuses its absence; `min_exclusive`: > 0.
  bool Number(const YAML::Node& map, const std::string& key, const std::string& field,
              bool required, double* out, double lo = 0.0, bool lo_open = true,
              double hi = HUGE_VAL) {
    const YAML::Node node = map[key];
    if (!node) {
      if (required) Error(Line(map), field, "required figure missing");
      return false;
    }
    double v = 0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, v) || !std::isfinite(v)) {
      Error(Line(node), field, absl::StrCat("expected a number, got '", node.Scalar(), "'"));
      return false;
    }
    if ((lo_open ? v <= lo : v < lo) || v > hi) {
      Error(Line(node), field,
            absl::StrCat("must be ", lo_open ? "> " : ">= ", lo,
                         std::isfinite(hi) ? absl::StrCat(" and <= ", hi) : "", ", got ", v));
      return false;
    }
    *out = v;
    return true;
  }

  bool Bool(const YAML::Node& map, const std::string& key, const std::string& field, bool* out) {
    const YAML::Node node = map[key];
    if (!node) return false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, *out)) {
      Error(Line(node), field, absl::StrCat("expected true or false, got '", node.Scalar(), "'"));
      return false;
    }
    return true;
  }

  bool Map(const YAML::Node& map, const std::string& key, YAML::Node* out) {
    const YAML::Node node = map[key];
    if (!node) return false;
    if (!node.IsMap()) {
      Error(Line(node), key, "expected a mapping");
      return false;
    }
    *out = node;
    return true;
  }

  absl::Status Result() const {
    if (errors_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
  }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

constexpr double kGB = 1e9;

// The efficiency keys, their members and their admissible ranges.
struct EfficiencyKey {
  const char* name;
  double Efficiency::*member;
  double lo;
  double hi;
};
constexpr EfficiencyKey kEfficiencyKeys[] = {
    {"gemm_max", &Efficiency::gemm_max, 0.0, 1.0},
    {"gemm_half", &Efficiency::gemm_half, 0.0, 1e16},
    {"attention", &Efficiency::attention, 0.0, 1.0},
    {"memory", &Efficiency::memory, 0.0, 1.0},
    {"intra", &Efficiency::intra, 0.0, 1.0},
    {"inter", &Efficiency::inter, 0.0, 1.0},
    {"overlap_drag", &Efficiency::overlap_drag, -1.0, 1.0},
    {"kernel_s", &Efficiency::kernel_s, -1.0, 1.0},
    {"recompute", &Efficiency::recompute, 0.0, 2.0},
    {"pressure", &Efficiency::pressure, -1.0, 100.0},
};

std::vector<std::string> EfficiencyNames() {
  std::vector<std::string> names;
  for (const EfficiencyKey& k : kEfficiencyKeys) names.push_back(k.name);
  return names;
}

}  // namespace

absl::StatusOr<ClusterProfile> ParseClusterProfile(const std::string& text,
                                                   const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ":1: expected a mapping of figures"));
  }
  Reader r(name);
  ClusterProfile p;
  p.name = std::filesystem::path(name).stem().string();
  r.Keys(root, "",
         {"device", "peak_tflops", "peak_tflops_fp32", "hbm_gb", "hbm_bandwidth_gbps",
          "gpus_per_node", "intra_node", "inter_node", "assumptions", "efficiency", "sources"});
  if (root["device"] && root["device"].IsScalar()) p.device = root["device"].Scalar();
  if (!root["device"]) r.Error(1, "device", "required: the device's name");
  double v = 0;
  if (r.Number(root, "peak_tflops", "peak_tflops", true, &v)) p.peak_flops = v * 1e12;
  if (r.Number(root, "peak_tflops_fp32", "peak_tflops_fp32", false, &v)) {
    p.peak_flops_fp32 = v * 1e12;
  }
  if (r.Number(root, "hbm_gb", "hbm_gb", true, &v)) p.hbm_bytes = v * kGB;
  if (r.Number(root, "hbm_bandwidth_gbps", "hbm_bandwidth_gbps", true, &v)) {
    p.hbm_bandwidth = v * kGB;
  }
  if (r.Number(root, "gpus_per_node", "gpus_per_node", true, &v, 1.0, false, 4096)) {
    if (v != std::floor(v)) {
      r.Error(Line(root["gpus_per_node"]), "gpus_per_node", "must be a whole number");
    }
    p.gpus_per_node = static_cast<int64_t>(v);
  }
  for (const char* tier : {"intra_node", "inter_node"}) {
    YAML::Node node;
    if (!r.Map(root, tier, &node)) {
      if (!root[tier]) r.Error(1, tier, "required: bandwidth_gbps and latency_us");
      continue;
    }
    r.Keys(node, tier, {"bandwidth_gbps", "latency_us"});
    const bool intra = std::string(tier) == "intra_node";
    if (r.Number(node, "bandwidth_gbps", absl::StrCat(tier, ".bandwidth_gbps"), true, &v)) {
      (intra ? p.intra_bandwidth : p.inter_bandwidth) = v * kGB;
    }
    if (r.Number(node, "latency_us", absl::StrCat(tier, ".latency_us"), true, &v, 0.0, false)) {
      (intra ? p.intra_latency : p.inter_latency) = v * 1e-6;
    }
  }
  YAML::Node a;
  if (r.Map(root, "assumptions", &a)) {
    r.Keys(a, "assumptions",
           {"fused_attention", "causal_skip", "grad_reduce_bytes", "weight_bytes", "grad_bytes",
            "optimizer_bytes"});
    ClusterAssumptions& as = p.assumptions;
    r.Bool(a, "fused_attention", "assumptions.fused_attention", &as.fused_attention);
    r.Bool(a, "causal_skip", "assumptions.causal_skip", &as.causal_skip);
    r.Number(a, "grad_reduce_bytes", "assumptions.grad_reduce_bytes", false, &as.grad_reduce_bytes,
             0.0, true, 8.0);
    r.Number(a, "weight_bytes", "assumptions.weight_bytes", false, &as.weight_bytes, 0.0, true, 8);
    r.Number(a, "grad_bytes", "assumptions.grad_bytes", false, &as.grad_bytes, 0.0, true, 8);
    r.Number(a, "optimizer_bytes", "assumptions.optimizer_bytes", false, &as.optimizer_bytes, 0.0,
             false, 32);
  }
  YAML::Node e;
  if (r.Map(root, "efficiency", &e)) {
    r.Keys(e, "efficiency", EfficiencyNames());
    for (const EfficiencyKey& k : kEfficiencyKeys) {
      r.Number(e, k.name, absl::StrCat("efficiency.", k.name), false, &(p.efficiency.*k.member),
               k.lo, true, k.hi);
    }
  }
  if (absl::Status s = r.Result(); !s.ok()) return s;
  if (p.peak_flops_fp32 <= 0) p.peak_flops_fp32 = p.peak_flops;
  return p;
}

absl::StatusOr<ClusterProfile> LoadClusterProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the cluster profile"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseClusterProfile(text.str(), path);
}

nlohmann::json EfficiencyToJson(const Efficiency& e) {
  nlohmann::json j = nlohmann::json::object();
  for (const EfficiencyKey& k : kEfficiencyKeys) j[k.name] = e.*k.member;
  return j;
}

absl::StatusOr<Efficiency> EfficiencyFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"efficiency\" must be an object"));
  }
  Efficiency e;
  const std::vector<std::string> names = EfficiencyNames();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(names.begin(), names.end(), it.key()) == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": efficiency.", it.key(),
                       ": unknown key (known: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  for (const EfficiencyKey& k : kEfficiencyKeys) {
    if (!j.contains(k.name)) continue;
    const nlohmann::json& v = j[k.name];
    if (!v.is_number() || v.get<double>() <= k.lo || v.get<double>() > k.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": efficiency.", k.name, ": must be a number in (", k.lo, ", ", k.hi, "]"));
    }
    e.*k.member = v.get<double>();
  }
  return e;
}

}  // namespace xmod
