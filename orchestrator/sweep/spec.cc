#include "orchestrator/sweep/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xmod {

std::string_view MatchModeName(MatchMode mode) {
  return mode == MatchMode::kFlops ? "flops" : "layers";
}

std::string_view ScheduleName(Schedule schedule) {
  switch (schedule) {
    case Schedule::kCosine: return "cosine";
    case Schedule::kConstant: return "constant";
    case Schedule::kWsd: return "wsd";
  }
  return "unknown";
}

const ScaleSpec* SweepSpec::FindScale(const std::string& scale_name) const {
  for (const ScaleSpec& s : scales) {
    if (s.name == scale_name) return &s;
  }
  return nullptr;
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within two edits, else "".
std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = &c;
    }
  }
  return best ? absl::StrCat(" (did you mean '", *best, "'?)") : "";
}

// Collects problems while walking the document, so one run reports all of them.
class SpecParser {
 public:
  explicit SpecParser(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<SweepSpec> Parse(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ":", e.mark.line + 1,
                                                      ": (document): ", e.msg));
    }
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":1: (document): a sweep file must be a YAML mapping"));
    }
    SweepSpec spec;
    spec.source = source_;
    spec.yaml_text = text;
    ParseTop(root, &spec);
    if (errors_.empty()) CrossCheck(root, &spec);
    if (!errors_.empty()) {
      return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
    }
    return spec;
  }

 private:
  static int Line(const YAML::Node& node) { return node.Mark().line + 1; }

  void Error(int line, const std::string& field, const std::string& what) {
    errors_.push_back(absl::StrCat(source_, ":", std::max(line, 1), ": ", field, ": ", what));
  }

  // Reports keys of `map` that are not in `allowed` (with a suggestion) and duplicates.
  void CheckKeys(const YAML::Node& map, const std::string& prefix,
                 const std::vector<std::string>& allowed) {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string field = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (!seen.insert(key).second) {
        Error(Line(it->first), field, "duplicate key");
      } else if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        Error(Line(it->first), field,
              absl::StrCat("unknown key '", key, "'", DidYouMean(key, allowed)));
      }
    }
  }

  bool ExpectMap(const YAML::Node& node, const std::string& field) {
    if (node.IsMap()) return true;
    Error(Line(node), field, "expected a mapping");
    return false;
  }

  template <typename T>
  bool Scalar(const YAML::Node& node, const std::string& field, const char* type_name, T* out) {
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, *out)) {
      const std::string shown = node.IsScalar() ? absl::StrCat("'", node.Scalar(), "'")
                                                : (node.IsSequence() ? "a list" : "a mapping");
      Error(Line(node), field, absl::StrCat("expected ", type_name, ", got ", shown));
      return false;
    }
    return true;
  }

  bool Int(const YAML::Node& node, const std::string& field, int64_t* out) {
    // yaml-cpp would accept 1e3 for an integer through a double; insist on digits.
    if (node.IsScalar()) {
      const std::string& s = node.Scalar();
      const bool digits = !s.empty() && std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) {
        Error(Line(node), field, absl::StrCat("expected an integer, got '", s, "'"));
        return false;
      }
    }
    return Scalar(node, field, "an integer", out);
  }

  bool Double(const YAML::Node& node, const std::string& field, double* out) {
    if (!Scalar(node, field, "a number", out)) return false;
    if (!std::isfinite(*out)) {
      Error(Line(node), field, "expected a finite number");
      return false;
    }
    return true;
  }

  bool String(const YAML::Node& node, const std::string& field, std::string* out) {
    return Scalar(node, field, "a string", out);
  }

  // A grid axis: a scalar (one value) or a non-empty list.
  template <typename T, typename ReadFn>
  void Axis(const YAML::Node& node, const std::string& field, std::vector<T>* out, ReadFn read) {
    if (node.IsSequence()) {
      if (node.size() == 0) {
        Error(Line(node), field, "empty grid axis; give at least one value");
        return;
      }
      for (size_t i = 0; i < node.size(); ++i) {
        T value{};
        if (read(node[i], absl::StrCat(field, "[", i, "]"), &value)) out->push_back(value);
      }
    } else if (node.IsScalar()) {
      T value{};
      if (read(node, field, &value)) out->push_back(value);
    } else {
      Error(Line(node), field, "expected a value or a list of values");
    }
  }

  void ParseTop(const YAML::Node& root, SweepSpec* spec) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      key_lines_.emplace(it->first.Scalar(), Line(it->first));
    }
    CheckKeys(root, "", {"name", "description", "data", "family", "match", "scales", "grid",
                         "baselines", "budget", "train", "resources"});
    if (root["name"]) {
      if (String(root["name"], "name", &spec->name)) {
        const bool ok = !spec->name.empty() &&
                        std::all_of(spec->name.begin(), spec->name.end(), [](char c) {
                          return std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                                 c == '_' || c == '.';
                        });
        if (!ok) Error(Line(root["name"]), "name", "use letters, digits, '-', '_' and '.' only");
      }
    } else {
      Error(1, "name", "missing; every sweep needs a name");
    }
    if (root["description"]) String(root["description"], "description", &spec->description);

    if (root["family"]) {
      std::string family;
      if (String(root["family"], "family", &family)) {
        auto parsed = ParseFamily(family);
        if (parsed.ok()) {
          spec->family = *parsed;
        } else {
          Error(Line(root["family"]), "family", std::string(parsed.status().message()));
        }
      }
    }
    if (root["match"]) {
      std::string match;
      if (String(root["match"], "match", &match)) {
        if (match == "flops") {
          spec->match = MatchMode::kFlops;
        } else if (match == "layers") {
          spec->match = MatchMode::kLayers;
        } else {
          Error(Line(root["match"]), "match",
                absl::StrCat("unknown value '", match, "' (known: flops, layers)"));
        }
      }
    }

    if (root["data"]) {
      ParseData(root["data"], spec);
    } else {
      Error(1, "data", "missing; give a dataset folder (data.path) or data.synthetic: true");
    }
    if (root["scales"]) {
      ParseScales(root["scales"], spec);
    } else {
      Error(1, "scales", "missing; define at least one named scale");
    }
    if (root["grid"]) {
      ParseGrid(root["grid"], spec);
    } else {
      Error(1, "grid", "missing; the grid needs at least a context axis");
    }
    if (root["baselines"]) ParseBaselines(root["baselines"], spec);
    if (root["budget"]) {
      ParseBudget(root["budget"], spec);
    } else {
      Error(1, "budget", "missing; give one of tokens_per_param, flops or tokens");
    }
    if (root["train"]) {
      ParseTrain(root["train"], spec);
    } else {
      Error(1, "train", "missing; train.batch_tokens at least is required");
    }
    if (root["resources"]) ParseResources(root["resources"], spec);
  }

  // The line of a top-level key ("data:"), where section-wide problems point.
  int KeyLine(const std::string& key) const {
    auto it = key_lines_.find(key);
    return it == key_lines_.end() ? 1 : it->second;
  }

  void ParseData(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "data")) return;
    CheckKeys(node, "data", {"path", "synthetic", "seed", "vocab_size"});
    DataSpec& d = spec->data;
    if (node["path"]) String(node["path"], "data.path", &d.path);
    if (node["synthetic"]) Scalar(node["synthetic"], "data.synthetic", "true or false", &d.synthetic);
    if (node["seed"]) {
      int64_t seed = 0;
      if (Int(node["seed"], "data.seed", &seed)) d.synthetic_seed = static_cast<uint64_t>(seed);
    }
    if (node["vocab_size"] && Int(node["vocab_size"], "data.vocab_size", &d.vocab_size) &&
        d.vocab_size < 2) {
      Error(Line(node["vocab_size"]), "data.vocab_size", "must be at least 2");
    }
    if (!d.path.empty() && d.synthetic) {
      Error(KeyLine("data"), "data", "give either data.path or data.synthetic: true, not both");
    } else if (d.path.empty() && !d.synthetic) {
      Error(KeyLine("data"), "data", "missing data; give data.path or data.synthetic: true");
    }
  }

  void ParseScales(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "scales")) return;
    if (node.size() == 0) Error(Line(node), "scales", "define at least one named scale");
    CheckKeys(node, "scales", [&] {
      std::vector<std::string> keys;  // any name is allowed once; this only finds duplicates
      for (auto it = node.begin(); it != node.end(); ++it) keys.push_back(it->first.Scalar());
      return keys;
    }());
    for (auto it = node.begin(); it != node.end(); ++it) {
      ScaleSpec scale;
      scale.name = it->first.Scalar();
      const std::string field = absl::StrCat("scales.", scale.name);
      const YAML::Node& body = it->second;
      if (spec->FindScale(scale.name) != nullptr || !ExpectMap(body, field)) continue;
      CheckKeys(body, field, {"d_model", "n_heads", "n_layers", "d_ff"});
      bool ok = true;
      for (const char* required : {"d_model", "n_heads", "n_layers"}) {
        if (!body[required]) {
          Error(Line(body), absl::StrCat(field, ".", required), "missing");
          ok = false;
        }
      }
      if (!ok) continue;
      ok &= Positive(body["d_model"], field + ".d_model", &scale.d_model);
      ok &= Positive(body["n_heads"], field + ".n_heads", &scale.n_heads);
      ok &= Positive(body["n_layers"], field + ".n_layers", &scale.n_layers);
      if (body["d_ff"]) ok &= Positive(body["d_ff"], field + ".d_ff", &scale.d_ff);
      if (!ok) continue;
      if (scale.d_model % scale.n_heads != 0) {
        Error(Line(body["n_heads"]), field + ".n_heads",
              absl::StrCat("d_model ", scale.d_model, " is not divisible by n_heads ",
                           scale.n_heads));
        continue;
      }
      if ((scale.d_model / scale.n_heads) % 2 != 0) {
        Error(Line(body["n_heads"]), field + ".n_heads",
              absl::StrCat("head dimension ", scale.d_model / scale.n_heads,
                           " must be even for rotary embeddings"));
        continue;
      }
      if (scale.d_ff == 0) scale.d_ff = DefaultDff(scale.d_model);
      spec->scales.push_back(scale);
    }
  }

  bool Positive(const YAML::Node& node, const std::string& field, int64_t* out) {
    if (!Int(node, field, out)) return false;
    if (*out < 1) {
      Error(Line(node), field, absl::StrCat("must be at least 1, got ", *out));
      return false;
    }
    return true;
  }

  void ParseGrid(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "grid")) return;
    CheckKeys(node, "grid", {"scale", "sparsity", "stride", "context"});
    grid_line_ = KeyLine("grid");
    if (node["scale"]) {
      Axis(node["scale"], "grid.scale", &spec->grid_scales,
           [&](const YAML::Node& n, const std::string& f, std::string* v) {
             return String(n, f, v);
           });
      scale_axis_ = node["scale"];
    }
    if (node["sparsity"]) {
      has_sparsity_ = true;
      Axis(node["sparsity"], "grid.sparsity", &spec->grid_sparsity,
           [&](const YAML::Node& n, const std::string& f, double* v) {
             if (!Double(n, f, v)) return false;
             if (*v < 0.0 || *v >= 1.0) {
               Error(Line(n), f, absl::StrCat("sparsity must be in [0, 1), got ", n.Scalar()));
               return false;
             }
             return true;
           });
    }
    if (node["stride"]) {
      has_stride_ = true;
      Axis(node["stride"], "grid.stride", &spec->grid_stride,
           [&](const YAML::Node& n, const std::string& f, int64_t* v) {
             if (!Int(n, f, v)) return false;
             if (*v < 1) {
               Error(Line(n), f, absl::StrCat("stride must be at least 1, got ", *v));
               return false;
             }
             return true;
           });
    }
    if (node["context"]) {
      Axis(node["context"], "grid.context", &spec->grid_context,
           [&](const YAML::Node& n, const std::string& f, int64_t* v) {
             if (!Int(n, f, v)) return false;
             if (*v < 1) {
               Error(Line(n), f, absl::StrCat("context must be at least 1, got ", *v));
               return false;
             }
             return true;
           });
    } else {
      Error(Line(node), "grid.context", "missing; give at least one context length");
    }
  }

  void ParseBaselines(const YAML::Node& node, SweepSpec* spec) {
    if (!node.IsSequence()) {
      Error(Line(node), "baselines", "expected a list of families (dense, mod)");
      return;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string field = absl::StrCat("baselines[", i, "]");
      std::string name;
      if (!String(node[i], field, &name)) continue;
      auto family = ParseFamily(name);
      if (!family.ok()) {
        Error(Line(node[i]), field, std::string(family.status().message()));
      } else if (*family == Family::kXmod) {
        Error(Line(node[i]), field, "xmod is the swept family, not a baseline (use dense, mod)");
      } else {
        spec->baselines.push_back(*family);
      }
    }
  }

  void ParseBudget(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "budget")) return;
    CheckKeys(node, "budget", {"tokens_per_param", "flops", "tokens"});
    int given = 0;
    for (auto [key, kind] : {std::pair{"tokens_per_param", BudgetKind::kTokensPerParam},
                             std::pair{"flops", BudgetKind::kFlops},
                             std::pair{"tokens", BudgetKind::kTokens}}) {
      if (!node[key]) continue;
      if (++given > 1) continue;
      spec->budget_kind = kind;
      const std::string field = absl::StrCat("budget.", key);
      Axis(node[key], field, &spec->budget_values,
           [&](const YAML::Node& n, const std::string& f, double* v) {
             if (!Double(n, f, v)) return false;
             if (*v <= 0) {
               Error(Line(n), f, absl::StrCat("must be positive, got ", n.Scalar()));
               return false;
             }
             return true;
           });
    }
    if (given == 0) {
      Error(KeyLine("budget"), "budget",
            "no budget; give one of tokens_per_param, flops or tokens");
    } else if (given > 1) {
      Error(KeyLine("budget"), "budget",
            "two budgets given; keep exactly one of tokens_per_param, flops or tokens");
    }
  }

  void ParseTrain(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "train")) return;
    CheckKeys(node, "train",
              {"batch_tokens", "micro_batch_tokens", "lr", "min_lr_ratio", "warmup_steps",
               "warmup_fraction", "schedule", "decay_fraction", "weight_decay", "grad_clip",
               "beta1", "beta2", "eval_interval", "eval_tokens", "checkpoint_interval",
               "log_interval", "seed", "precision", "balance_coef", "router_coef"});
    TrainSpec& t = spec->train;
    train_node_ = node;
    if (node["batch_tokens"]) {
      Positive(node["batch_tokens"], "train.batch_tokens", &t.batch_tokens);
    } else {
      Error(Line(node), "train.batch_tokens", "missing; tokens per optimizer step");
    }
    if (node["micro_batch_tokens"]) {
      Positive(node["micro_batch_tokens"], "train.micro_batch_tokens", &t.micro_batch_tokens);
    }
    auto in_range = [&](const char* key, double lo, double hi, bool hi_open, double* out) {
      if (!node[key]) return;
      const std::string field = absl::StrCat("train.", key);
      if (!Double(node[key], field, out)) return;
      if (*out < lo || *out > hi || (hi_open && *out == hi)) {
        Error(Line(node[key]), field,
              absl::StrCat("must be in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ",
                           node[key].Scalar()));
      }
    };
    in_range("lr", 0.0, 10.0, false, &t.lr);
    if (node["lr"] && t.lr <= 0) Error(Line(node["lr"]), "train.lr", "must be positive");
    in_range("min_lr_ratio", 0.0, 1.0, false, &t.min_lr_ratio);
    in_range("warmup_fraction", 0.0, 1.0, true, &t.warmup_fraction);
    in_range("decay_fraction", 0.0, 1.0, false, &t.decay_fraction);
    in_range("weight_decay", 0.0, 10.0, false, &t.weight_decay);
    in_range("grad_clip", 0.0, 1e9, false, &t.grad_clip);
    in_range("beta1", 0.0, 1.0, true, &t.beta1);
    in_range("beta2", 0.0, 1.0, true, &t.beta2);
    in_range("balance_coef", 0.0, 1e3, false, &t.balance_coef);
    in_range("router_coef", 0.0, 1e3, false, &t.router_coef);
    if (node["warmup_steps"]) {
      if (Int(node["warmup_steps"], "train.warmup_steps", &t.warmup_steps) && t.warmup_steps < 0) {
        Error(Line(node["warmup_steps"]), "train.warmup_steps", "must not be negative");
      }
      if (node["warmup_fraction"]) {
        Error(Line(node["warmup_steps"]), "train.warmup_steps",
              "give warmup_steps or warmup_fraction, not both");
      }
    }
    auto non_negative = [&](const char* key, int64_t* out) {
      if (!node[key]) return;
      const std::string field = absl::StrCat("train.", key);
      if (Int(node[key], field, out) && *out < 0) {
        Error(Line(node[key]), field, "must not be negative");
      }
    };
    non_negative("eval_interval", &t.eval_interval);
    non_negative("checkpoint_interval", &t.checkpoint_interval);
    if (node["eval_tokens"]) Positive(node["eval_tokens"], "train.eval_tokens", &t.eval_tokens);
    if (node["log_interval"]) Positive(node["log_interval"], "train.log_interval", &t.log_interval);
    if (node["seed"]) {
      int64_t seed = 0;
      if (Int(node["seed"], "train.seed", &seed)) t.seed = static_cast<uint64_t>(seed);
    }
    if (node["schedule"]) {
      std::string s;
      if (String(node["schedule"], "train.schedule", &s)) {
        if (s == "cosine") {
          t.schedule = Schedule::kCosine;
        } else if (s == "constant") {
          t.schedule = Schedule::kConstant;
        } else if (s == "wsd") {
          t.schedule = Schedule::kWsd;
        } else {
          Error(Line(node["schedule"]), "train.schedule",
                absl::StrCat("unknown schedule '", s, "' (known: cosine, constant, wsd)",
                             DidYouMean(s, {"cosine", "constant", "wsd"})));
        }
      }
    }
    if (node["precision"] && String(node["precision"], "train.precision", &t.precision) &&
        t.precision != "fp32" && t.precision != "bf16") {
      Error(Line(node["precision"]), "train.precision",
            absl::StrCat("unknown precision '", t.precision, "' (known: fp32, bf16)"));
    }
  }

  void ParseResources(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "resources")) return;
    CheckKeys(node, "resources", {"ranks", "max_attempts", "priority"});
    ResourceSpec& r = spec->resources;
    if (node["ranks"]) Positive(node["ranks"], "resources.ranks", &r.ranks);
    if (node["max_attempts"]) {
      Positive(node["max_attempts"], "resources.max_attempts", &r.max_attempts);
    }
    if (node["priority"]) Int(node["priority"], "resources.priority", &r.priority);
  }

  // Checks that need more than one section; runs only on an otherwise clean file.
  void CrossCheck(const YAML::Node& root, SweepSpec* spec) {
    std::vector<std::string> names;
    for (const ScaleSpec& s : spec->scales) names.push_back(s.name);
    if (spec->grid_scales.empty()) {
      spec->grid_scales = names;  // no scale axis: every defined scale
    } else {
      for (size_t i = 0; i < spec->grid_scales.size(); ++i) {
        const std::string& name = spec->grid_scales[i];
        if (spec->FindScale(name) == nullptr) {
          const YAML::Node n = scale_axis_.IsSequence() ? scale_axis_[i] : scale_axis_;
          Error(Line(n), scale_axis_.IsSequence() ? absl::StrCat("grid.scale[", i, "]")
                                                  : std::string("grid.scale"),
                absl::StrCat("undefined scale '", name, "'", DidYouMean(name, names),
                             " (defined: ", absl::StrJoin(names, ", "), ")"));
        }
      }
    }

    const std::string family(FamilyName(spec->family));
    if (spec->family == Family::kXmod) {
      if (!has_sparsity_) {
        Error(grid_line_, "grid.sparsity", "family xmod needs a sparsity axis");
      }
      if (!has_stride_) Error(grid_line_, "grid.stride", "family xmod needs a stride axis");
    } else {
      if (has_sparsity_) {
        Error(grid_line_, "grid.sparsity",
              absl::StrCat("family ", family, " has a fixed sparsity; remove this axis"));
      }
      if (has_stride_) {
        Error(grid_line_, "grid.stride",
              absl::StrCat("family ", family, " has a fixed stride; remove this axis"));
      }
    }

    const TrainSpec& t = spec->train;
    const int line = Line(train_node_["batch_tokens"]);
    for (int64_t context : spec->grid_context) {
      if (t.batch_tokens % context != 0) {
        Error(line, "train.batch_tokens",
              absl::StrCat("batch_tokens ", t.batch_tokens, " is not a multiple of context ",
                           context, " (grid.context)"));
        continue;
      }
      const int64_t rows = t.batch_tokens / context;
      if (rows % spec->resources.ranks != 0) {
        Error(line, "train.batch_tokens",
              absl::StrCat(rows, " sequences of context ", context, " do not split evenly over ",
                           spec->resources.ranks, " ranks (resources.ranks)"));
      }
      if (t.micro_batch_tokens > 0 && t.micro_batch_tokens % context != 0) {
        Error(Line(train_node_["micro_batch_tokens"]), "train.micro_batch_tokens",
              absl::StrCat("micro_batch_tokens ", t.micro_batch_tokens,
                           " is not a multiple of context ", context, " (grid.context)"));
      }
    }
    if (spec->data.vocab_size > 0 && spec->data.synthetic && spec->data.vocab_size > 65536) {
      Error(Line(root["data"]), "data.vocab_size", "the synthetic source supports at most 65536");
    }
  }

  std::string source_;
  std::vector<std::string> errors_;
  std::map<std::string, int> key_lines_;
  int grid_line_ = 1;
  bool has_sparsity_ = false;
  bool has_stride_ = false;
  YAML::Node scale_axis_;
  YAML::Node train_node_;
};

}  // namespace

absl::StatusOr<SweepSpec> ParseSweepSpec(const std::string& text, const std::string& source) {
  return SpecParser(source).Parse(text);
}

absl::StatusOr<SweepSpec> LoadSweepSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the sweep file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseSweepSpec(buffer.str(), path);
}

}  // namespace xmod
