#include "orchestrator/sweep/spec.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/fit/law_registry.h"
#include "orchestrator/sweep/family/sweep_family.h"
#include "orchestrator/sweep/section.h"

namespace xmod {

std::string_view MatchModeName(MatchMode mode) {
  return mode == MatchMode::kFlops ? "flops" : "layers";
}

const ScaleSpec* SweepSpec::FindScale(const std::string& scale_name) const {
  for (const ScaleSpec& s : scales) {
    if (s.name == scale_name) return &s;
  }
  return nullptr;
}

std::vector<GridBlock> SweepSpec::Blocks() const {
  if (!blocks.empty()) return blocks;
  GridBlock b;
  b.family = family;
  b.scales = grid_scales;
  if (b.scales.empty()) {
    for (const ScaleSpec& s : scales) b.scales.push_back(s.name);
  }
  b.sparsity = grid_sparsity;
  b.stride = grid_stride;
  b.context = grid_context;
  b.baselines = baselines;
  b.budget_kind = budget_kind;
  b.match_training_flops = match_training_flops;
  b.budget_values = budget_values;
  b.seeds = grid_seeds;
  b.top_k = grid_top_k;
  b.granularity = grid_granularity;
  b.line = grid_line;
  b.budget_line = budget_line;
  return {b};
}

int SweepSpec::LineOf(const std::string& field, int fallback) const {
  auto it = field_lines.find(field);
  return it == field_lines.end() ? fallback : it->second;
}

std::pair<std::string, int> SweepSpec::AxisValueAt(const std::string& field, size_t index,
                                                   int fallback) const {
  const std::string element = absl::StrCat(field, "[", index, "]");
  if (auto it = field_lines.find(element); it != field_lines.end()) return {element, it->second};
  return {field, LineOf(field, fallback)};
}

std::string SweepSpec::Where(const std::string& field, int line) const {
  return absl::StrCat(source, ":", std::max(line, 1), ": ", field, ": ");
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

// ParseFamily's refusal of `name`, with a suggestion when it is a near miss.
std::string FamilyProblem(const std::string& name, const absl::Status& status) {
  std::string message(status.message());
  if (absl::StartsWith(message, "unknown")) {
    std::vector<std::string> known;
    for (const FamilyTraits& f : Families()) known.emplace_back(f.name);
    absl::StrAppend(&message, DidYouMean(name, known));
  }
  return message;
}

// Counts the documents of a YAML stream without building them, and remembers
// where the second one starts.
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark second;  // the first node of the second document

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark) {
    if (documents == 2 && !seen_second_node_) {
      second = mark;
      seen_second_node_ = true;
    }
  }
  bool seen_second_node_ = false;
};

// The 1-based line of the first byte of `text` that is not part of well-formed
// UTF-8 (no overlong forms, surrogates or code points above U+10FFFF); 0 when the
// whole text is UTF-8. YAML is UTF-8, yaml-cpp passes other bytes through, and
// the resolved config (JSON) cannot hold them, so they are refused at the door.
int FirstNonUtf8Line(const std::string& text) {
  int line = 1;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '\n') ++line;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return line;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return line;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return line;
    }
    i += len;
  }
  return 0;
}

// The first document of `text`; an error when there is a second. yaml-cpp's own
// LoadAll (0.7 in Debian 12, 0.8.0 in Debian 13) never returns on some malformed
// streams, for instance "'a',": the parser reports an empty document at the stray
// ',' again and again without consuming it, and LoadAll collects them until memory
// runs out (jbeder/yaml-cpp#1040, fixed upstream after 0.8.0). The coordinator
// parses untrusted SubmitSweep text, so a hang there would be a denial of service:
// the documents are counted here, stopping at the second.
absl::StatusOr<YAML::Node> LoadSingleDocument(const std::string& text, const std::string& source) {
  if (const int line = FirstNonUtf8Line(text); line > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ":", line, ": (document): not valid UTF-8; a sweep file is UTF-8 text"));
  }
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.documents > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", counter.second.line + 1,
                       ": (document): a sweep file holds one YAML document; a second one (or text "
                       "after the end of the first) starts here"));
    }
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": (document): ", e.msg));
  }
}

// An upper bound on an integer field (common/accounting.h says why each is
// where it is), as messages write it.
struct Bound {
  int64_t max;
  const char* text;  // "2^20"
  const char* why;
};
constexpr Bound kCountBound{kMaxCount, "2^53", "the most a count may be, exact as a double"};
constexpr Bound kDModelBound{kMaxDModel, "2^20", kBoundsDoc};
constexpr Bound kHiddenBound{kMaxHidden, "2^22", kBoundsDoc};
constexpr Bound kLayersBound{kMaxLayers, "10^5",
                             "the deepest model a FLOP match searches; sweeps/README.md"};
constexpr Bound kVocabBound{kMaxVocab, "2^32", "token files hold 16- or 32-bit ids"};
constexpr Bound kContextBound{kMaxContext, "2^24", kBoundsDoc};
constexpr Bound kExpertsBound{kMaxExperts, "2^20", kBoundsDoc};
constexpr Bound kBatchBound{kMaxBatchTokens, "2^40", kBoundsDoc};
constexpr Bound kRanksBound{kMaxRanks, "2^20", kBoundsDoc};
constexpr Bound kPriorityBound{1000000000, "10^9", kBoundsDoc};

// Collects problems while walking the document, so one run reports all of them.
class SpecParser {
  struct BlockInfo;  // what a grid block wrote (defined below)

 public:
  explicit SpecParser(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<SweepSpec> Parse(const std::string& text) {
    absl::StatusOr<YAML::Node> loaded = LoadSingleDocument(text, source_);
    if (!loaded.ok()) return loaded.status();
    const YAML::Node root = *std::move(loaded);
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":1: (document): a sweep file must be a YAML mapping"));
    }
    SweepSpec spec;
    spec.source = source_;
    spec.yaml_text = text;
    ParseTop(root, &spec);
    ReportUnknownKeys();
    spec.field_lines = field_lines_;
    if (errors_.empty()) CrossCheck(&spec);
    if (!errors_.empty()) {
      return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
    }
    return spec;
  }

 private:
  // What CrossCheck needs to know of one grid block: where it is and which axes
  // and budget it wrote.
  // A key CheckKeys did not find in its section's list (reported at the end).
  struct UnknownKey {
    int line = 1;
    std::string field, key, prefix;
    std::vector<std::string> allowed;
  };

  struct BlockInfo {
    int line = 1;
    std::string prefix;
    bool has_sparsity = false;
    bool has_stride = false;
    bool has_top_k = false;
    bool has_granularity = false;
    bool has_budget = false;
    YAML::Node scale_axis;
  };

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
      field_lines_.emplace(field, Line(it->first));
      if (!seen.insert(key).second) {
        Error(Line(it->first), field, "duplicate key");
      } else if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        unknown_keys_.push_back({Line(it->first), field, key, prefix, allowed});
      }
    }
    // Scale names are the user's own, not keys a section accepts.
    if (prefix != "scales") section_keys_[prefix].insert(allowed.begin(), allowed.end());
  }

  // The unknown keys, once every section has said what it accepts: a key that
  // another section of this file accepts (e.g. `sparsity:` outdented out of
  // `grid:`) is told where it belongs.
  void ReportUnknownKeys() {
    for (const UnknownKey& u : unknown_keys_) {
      std::vector<std::string> homes;
      for (const auto& [prefix, keys] : section_keys_) {
        if (prefix != u.prefix && keys.count(u.key) > 0) {
          homes.push_back(prefix.empty() ? "at the top level" : absl::StrCat("under ", prefix));
        }
      }
      std::string message = absl::StrCat("unknown key '", u.key, "'");
      if (homes.empty()) {
        absl::StrAppend(&message, DidYouMean(u.key, u.allowed));
      } else {
        absl::StrAppend(&message, u.prefix.empty() ? " at the top level" : " here", "; it belongs ",
                        absl::StrJoin(homes, " or "));
      }
      Error(u.line, u.field, message);
    }
    unknown_keys_.clear();
  }

  // The line of `field`'s value. A null value (`key:` with nothing after it) is
  // marked by yaml-cpp at the next token, often a line or more below; its key's
  // line (kept by CheckKeys) is the one to report.
  int ValueLine(const YAML::Node& node, const std::string& field) const {
    if (node.IsNull()) {
      auto it = field_lines_.find(field);
      if (it != field_lines_.end()) return it->second;
    }
    return Line(node);
  }

  // How a value that is not of the expected type is shown in a message.
  static std::string Shown(const YAML::Node& node) {
    if (node.IsScalar()) return absl::StrCat("'", node.Scalar(), "'");
    if (node.IsNull()) return "nothing (the value is empty)";
    return node.IsSequence() ? "a list" : "a mapping";
  }

  bool ExpectMap(const YAML::Node& node, const std::string& field) {
    if (node.IsMap()) return true;
    Error(ValueLine(node, field), field,
          node.IsNull() ? "expected a mapping, got nothing (the value is empty)"
                        : "expected a mapping");
    return false;
  }

  template <typename T>
  bool Scalar(const YAML::Node& node, const std::string& field, const char* type_name, T* out) {
    const int line = ValueLine(node, field);
    field_lines_[field] = line;  // the value's line, which a key's may not be
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, *out)) {
      Error(line, field, absl::StrCat("expected ", type_name, ", got ", Shown(node)));
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
      if (!YAML::convert<int64_t>::decode(node, *out)) {
        field_lines_[field] = Line(node);
        Error(Line(node), field,
              absl::StrCat("expected an integer, got ", s, ", past 2^63 - 1 (", kBoundsDoc, ")"));
        return false;
      }
    }
    return Scalar(node, field, "an integer", out);
  }

  // An integer in [lo, hi] at `node`: "must be at least lo" (as everywhere) or
  // "must be at most hi = 2^k (why)".
  bool IntIn(const YAML::Node& node, const std::string& field, int64_t lo, const Bound& hi,
             int64_t* out) {
    if (!Int(node, field, out)) return false;
    if (*out < lo) {
      Error(
          Line(node), field,
          lo == 0 ? "must not be negative" : absl::StrCat("must be at least ", lo, ", got ", *out));
      return false;
    }
    return AtMost(node, field, *out, hi);
  }

  bool AtMost(const YAML::Node& node, const std::string& field, int64_t value, const Bound& hi) {
    if (value <= hi.max) return true;
    Error(Line(node), field,
          absl::StrCat("must be at most ", hi.text, " = ", hi.max, ", got ", value, " (", hi.why,
                       ")"));
    return false;
  }

  // Seeds are unsigned: a negative one would wrap to a huge different seed.
  bool NonNegative(const YAML::Node& node, const std::string& field, int64_t value) {
    if (value >= 0) return true;
    Error(Line(node), field, absl::StrCat("must be >= 0, got ", value));
    return false;
  }

  bool Double(const YAML::Node& node, const std::string& field, double* out) {
    if (!Scalar(node, field, "a number", out)) return false;
    if (!std::isfinite(*out)) {
      Error(Line(node), field, "expected a finite number");
      return false;
    }
    if (*out == 0.0) *out = 0.0;  // -0.0 is 0: one value, one job (CanonicalJson does the same)
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
      Error(ValueLine(node, field), field, "expected a value or a list of values");
    }
  }

  void ParseTop(const YAML::Node& root, SweepSpec* spec) {
    for (auto it = root.begin(); it != root.end(); ++it) {
      key_lines_.emplace(it->first.Scalar(), Line(it->first));
    }
    std::vector<std::string> keys = {"name",   "description", "data",      "family",
                                     "match",  "scales",      "grid",      "baselines",
                                     "budget", "train",       "resources", "design"};
    for (const SweepFamily& f : SweepFamilies()) {
      if (f.section != nullptr) keys.emplace_back(f.section);
    }
    CheckKeys(root, "", keys);
    if (root["name"]) {
      if (String(root["name"], "name", &spec->name)) {
        const bool ok =
            !spec->name.empty() && std::all_of(spec->name.begin(), spec->name.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                     c == '.';
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
          Error(Line(root["family"]), "family", FamilyProblem(family, parsed.status()));
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
                absl::StrCat("unknown value '", match, "' (known: flops, layers)",
                             DidYouMean(match, {"flops", "layers"})));
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
    if (root["baselines"]) ParseBaselines(root["baselines"], "baselines", &spec->baselines);
    if (root["budget"]) {
      top_budget_ = ParseBudget(root["budget"], "budget", &spec->budget_kind, &spec->budget_values,
                                &spec->match_training_flops);
    }
    if (root["grid"]) {
      ParseGrid(root["grid"], spec);
    } else {
      Error(1, "grid", "missing; the grid needs at least a context axis");
    }
    if (root["design"]) ParseDesign(root["design"], spec);
    ParseFamilySections(root, spec);
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
    CheckKeys(node, "data", {"path", "synthetic", "seed", "vocab_size", "eos_token"});
    DataSpec& d = spec->data;
    if (node["path"] && String(node["path"], "data.path", &d.path) && d.path.empty()) {
      Error(Line(node["path"]), "data.path",
            "is empty; give a dataset folder, or data.synthetic: true");
    }
    if (node["synthetic"])
      Scalar(node["synthetic"], "data.synthetic", "true or false", &d.synthetic);
    if (node["seed"]) {
      int64_t seed = 0;
      if (Int(node["seed"], "data.seed", &seed) && NonNegative(node["seed"], "data.seed", seed)) {
        d.synthetic_seed = static_cast<uint64_t>(seed);
      }
    }
    if (node["vocab_size"]) {
      IntIn(node["vocab_size"], "data.vocab_size", 2, kVocabBound, &d.vocab_size);
    }
    if (node["eos_token"]) {
      IntIn(node["eos_token"], "data.eos_token", 0, kVocabBound, &d.eos_token);
      if (d.eos_token >= d.vocab_size) {
        Error(Line(node["eos_token"]), "data.eos_token",
              absl::StrCat(d.eos_token, " is outside data.vocab_size ", d.vocab_size));
      }
      if (d.synthetic || d.path.empty()) {
        Error(Line(node["eos_token"]), "data.eos_token",
              "only a dataset folder (data.path) has documents to end");
      }
    }
    if (!d.path.empty() && d.synthetic) {
      // At the second of the two, the one to remove.
      const bool path_last = Line(node["path"]) >= Line(node["synthetic"]);
      const char* last = path_last ? "path" : "synthetic";
      Error(Line(node[last]), absl::StrCat("data.", last),
            "give either data.path or data.synthetic: true, not both");
    } else if (d.path.empty() && !d.synthetic && !node["path"]) {
      Error(KeyLine("data"), "data", "missing data; give data.path or data.synthetic: true");
    } else if (!d.path.empty()) {
      // The dataset's fingerprint, when it can be read from here; a dataset kept
      // only where the workers run keeps its ids free of it.
      std::ifstream meta(d.path + "/meta.json");
      if (meta) {
        const nlohmann::json j = nlohmann::json::parse(meta, nullptr, false);
        if (!j.is_object()) {
          Error(Line(node["path"]), "data.path",
                absl::StrCat(d.path, "/meta.json is not a JSON object (docs/data.md)"));
        } else {
          if (j.contains("fingerprint") && j["fingerprint"].is_string()) {
            d.fingerprint = j["fingerprint"].get<std::string>();
          }
          // The EOS the sweep expects must be the one the data was written with.
          if (d.eos_token >= 0) {
            const int64_t recorded = j.contains("eos_token") && j["eos_token"].is_number_integer()
                                         ? j["eos_token"].get<int64_t>()
                                         : -1;
            if (recorded < 0) {
              Error(Line(node["eos_token"]), "data.eos_token",
                    absl::StrCat(d.path,
                                 "/meta.json records no eos_token: its documents are not "
                                 "marked (re-make it with xmod data import --eos or "
                                 "xmod data prepare, docs/data.md)"));
            } else if (recorded != d.eos_token) {
              Error(Line(node["eos_token"]), "data.eos_token",
                    absl::StrCat(d.eos_token, ", but ", d.path,
                                 "/meta.json says its documents "
                                 "end with ",
                                 recorded));
            }
          }
        }
      }
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
      // A copy: the iterator hands out a temporary pair, so a reference into it
      // would dangle (AddressSanitizer found it: stack-use-after-scope).
      const YAML::Node body = it->second;
      if (spec->FindScale(scale.name) != nullptr || !ExpectMap(body, field)) continue;
      CheckKeys(body, field, {"d_model", "n_heads", "n_layers", "d_ff", "train"});
      scale.line = Line(it->first);
      bool ok = true;
      for (const char* required : {"d_model", "n_heads", "n_layers"}) {
        if (!body[required]) {
          Error(Line(body), absl::StrCat(field, ".", required), "missing");
          ok = false;
        }
      }
      if (!ok) continue;
      ok &= Positive(body["d_model"], field + ".d_model", &scale.d_model, kDModelBound);
      ok &= Positive(body["n_heads"], field + ".n_heads", &scale.n_heads, kDModelBound);
      ok &= Positive(body["n_layers"], field + ".n_layers", &scale.n_layers, kLayersBound);
      if (body["d_ff"]) ok &= Positive(body["d_ff"], field + ".d_ff", &scale.d_ff, kHiddenBound);
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
      if (body["train"]) ParseScaleTrain(body["train"], field + ".train", &scale);
      spec->scales.push_back(scale);
    }
  }

  bool Positive(const YAML::Node& node, const std::string& field, int64_t* out,
                const Bound& hi = kCountBound) {
    return IntIn(node, field, 1, hi, out);
  }

  // scales.NAME.train: the fields a scale may set for itself.
  void ParseScaleTrain(const YAML::Node& node, const std::string& field, ScaleSpec* scale) {
    if (!ExpectMap(node, field)) return;
    CheckKeys(node, field, {"lr", "batch_tokens", "micro_batch_tokens", "warmup_steps"});
    if (node["lr"]) {
      double lr = 0;
      if (Double(node["lr"], field + ".lr", &lr)) {
        if (!(lr > 0 && lr <= 10)) {
          Error(Line(node["lr"]), field + ".lr",
                absl::StrCat("must be in (0, 10], got ", node["lr"].Scalar()));
        } else {
          scale->lr = lr;
        }
      }
    }
    int64_t v = 0;
    if (node["batch_tokens"] &&
        Positive(node["batch_tokens"], field + ".batch_tokens", &v, kBatchBound)) {
      scale->batch_tokens = v;
    }
    if (node["micro_batch_tokens"] &&
        Positive(node["micro_batch_tokens"], field + ".micro_batch_tokens", &v, kBatchBound)) {
      scale->micro_batch_tokens = v;
    }
    if (node["warmup_steps"] &&
        IntIn(node["warmup_steps"], field + ".warmup_steps", 0, kCountBound, &v)) {
      scale->warmup_steps = v;
    }
  }

  // `grid:` is one block (a mapping) or a list of blocks, each a mapping that may
  // also name its own family, budget and baselines.
  void ParseGrid(const YAML::Node& node, SweepSpec* spec) {
    grid_line_ = KeyLine("grid");
    spec->grid_line = grid_line_;  // a grid list's too, for the job-count refusal
    if (node.IsSequence()) {
      if (node.size() == 0) {
        Error(Line(node), "grid", "an empty list of grid blocks; give at least one");
        return;
      }
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string field = absl::StrCat("grid[", i, "]");
        if (!ExpectMap(node[i], field)) continue;
        GridBlock block;
        ParseBlock(node[i], field, /*in_list=*/true, spec, &block);
        spec->blocks.push_back(std::move(block));
      }
      return;
    }
    if (!ExpectMap(node, "grid")) return;
    GridBlock block;
    ParseBlock(node, "grid", /*in_list=*/false, spec, &block);
    spec->blocks.push_back(std::move(block));  // moved to the top-level fields in CrossCheck
    grid_is_map_ = true;
  }

  void ParseBlock(const YAML::Node& node, const std::string& prefix, bool in_list, SweepSpec* spec,
                  GridBlock* block) {
    std::vector<std::string> keys = {"scale", "sparsity", "stride",     "context",
                                     "seed",  "top_k",    "granularity"};
    if (in_list) {
      for (const char* k : {"family", "budget", "baselines"}) keys.push_back(k);
    }
    CheckKeys(node, prefix, keys);
    block->line = in_list ? Line(node) : grid_line_;
    block->field = prefix;
    BlockInfo info;
    info.line = block->line;
    info.prefix = prefix;
    block->family = spec->family;
    block->baselines = spec->baselines;
    block->budget_kind = spec->budget_kind;
    block->budget_values = spec->budget_values;
    block->match_training_flops = spec->match_training_flops;
    block->budget_line = KeyLine("budget");
    info.has_budget = top_budget_;
    if (in_list) ParseBlockOwn(node, prefix, block, &info);
    ParseBlockAxes(node, prefix, block, &info);
    block_info_.push_back(info);
  }

  // What an entry of a `grid:` list may set for itself: its family, baselines
  // and budget (each inherited from the top level when absent).
  void ParseBlockOwn(const YAML::Node& node, const std::string& prefix, GridBlock* block,
                     BlockInfo* info) {
    if (node["family"]) {
      std::string family;
      if (String(node["family"], prefix + ".family", &family)) {
        auto parsed = ParseFamily(family);
        if (parsed.ok()) {
          block->family = *parsed;
        } else {
          Error(Line(node["family"]), prefix + ".family", FamilyProblem(family, parsed.status()));
        }
      }
    }
    if (node["baselines"]) {
      block->baselines.clear();
      ParseBaselines(node["baselines"], prefix + ".baselines", &block->baselines);
    }
    if (node["budget"]) {
      block->budget_values.clear();
      block->budget_line = Line(node["budget"]);
      block->budget_field = prefix + ".budget";
      block->match_training_flops = false;
      info->has_budget = ParseBudget(node["budget"], prefix + ".budget", &block->budget_kind,
                                     &block->budget_values, &block->match_training_flops);
    }
  }

  // A block's axes: scale, sparsity, stride, top_k, granularity, context (required)
  // and seed.
  void ParseBlockAxes(const YAML::Node& node, const std::string& prefix, GridBlock* block,
                      BlockInfo* info_out) {
    BlockInfo& info = *info_out;
    if (node["scale"]) {
      Axis(node["scale"], prefix + ".scale", &block->scales,
           [&](const YAML::Node& n, const std::string& f, std::string* v) {
             return String(n, f, v);
           });
      info.scale_axis = node["scale"];
    }
    if (node["sparsity"]) {
      info.has_sparsity = true;
      Axis(node["sparsity"], prefix + ".sparsity", &block->sparsity,
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
      info.has_stride = true;
      Axis(node["stride"], prefix + ".stride", &block->stride,
           [&](const YAML::Node& n, const std::string& f, int64_t* v) {
             if (!Int(n, f, v)) return false;
             if (*v < 1) {
               Error(Line(n), f, absl::StrCat("stride must be at least 1, got ", *v));
               return false;
             }
             return AtMost(n, f, *v, kLayersBound);
           });
    }
    for (const char* key : {"top_k", "granularity"}) {
      if (!node[key]) continue;
      const bool top_k = key[0] == 't';
      (top_k ? info.has_top_k : info.has_granularity) = true;
      Axis(node[key], prefix + "." + key, top_k ? &block->top_k : &block->granularity,
           [&](const YAML::Node& n, const std::string& f, int64_t* v) {
             return Positive(n, f, v, top_k ? kExpertsBound : kHiddenBound);
           });
    }
    if (node["context"]) {
      Axis(node["context"], prefix + ".context", &block->context,
           [&](const YAML::Node& n, const std::string& f, int64_t* v) {
             if (!Int(n, f, v)) return false;
             if (*v < 1) {
               Error(Line(n), f, absl::StrCat("context must be at least 1, got ", *v));
               return false;
             }
             return AtMost(n, f, *v, kContextBound);
           });
    } else {
      Error(Line(node), prefix + ".context", "missing; give at least one context length");
    }
    if (node["seed"]) {
      Axis(node["seed"], prefix + ".seed", &block->seeds,
           [&](const YAML::Node& n, const std::string& f, uint64_t* v) {
             int64_t seed = 0;
             if (!Int(n, f, &seed)) return false;
             if (seed < 0) {
               Error(Line(n), f, absl::StrCat("a seed must not be negative, got ", seed));
               return false;
             }
             *v = static_cast<uint64_t>(seed);
             return true;
           });
      std::set<uint64_t> distinct(block->seeds.begin(), block->seeds.end());
      if (distinct.size() != block->seeds.size()) {
        Error(Line(node["seed"]), prefix + ".seed", "a seed is listed twice");
      }
    }
  }

  void ParseBaselines(const YAML::Node& node, const std::string& prefix, std::vector<Family>* out) {
    if (!node.IsSequence()) {
      Error(Line(node), prefix, "expected a list of families (dense, mod, moe, deco, mol, gdn)");
      return;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string field = absl::StrCat(prefix, "[", i, "]");
      std::string name;
      if (!String(node[i], field, &name)) continue;
      auto family = ParseFamily(name);
      if (!family.ok()) {
        Error(Line(node[i]), field, FamilyProblem(name, family.status()));
      } else if (*family == Family::kXmod) {
        Error(Line(node[i]), field,
              "xmod is the swept family, not a baseline (use dense, mod, moe, deco, mol, gdn)");
      } else {
        out->push_back(*family);
      }
    }
  }

  // Returns whether exactly one budget was given (errors are recorded otherwise).
  bool ParseBudget(const YAML::Node& node, const std::string& prefix, BudgetKind* kind_out,
                   std::vector<double>* values, bool* match_training_flops) {
    if (!ExpectMap(node, prefix)) return false;
    CheckKeys(node, prefix, {"tokens_per_param", "flops", "tokens", "match"});
    if (node["match"]) {
      std::string match;
      const std::string field = prefix + ".match";
      if (String(node["match"], field, &match)) {
        if (match == "training_flops") {
          *match_training_flops = true;
          if (node["flops"]) {
            Error(Line(node["match"]), field,
                  "a flops budget gives every job its FLOPs already; match applies to "
                  "tokens_per_param and tokens budgets");
          }
        } else if (match != "tokens") {
          Error(Line(node["match"]), field,
                absl::StrCat("unknown match '", match,
                             "' (known: tokens, the default: every job trains its own budget; "
                             "training_flops: a sparse job trains its dense partner's FLOPs)"));
        }
      }
    }
    int given = 0;
    // The keys in the order they are written, so a second budget is the later one.
    std::vector<std::pair<int, const char*>> written;
    for (auto [key, kind] :
         {std::pair{"tokens_per_param", BudgetKind::kTokensPerParam},
          std::pair{"flops", BudgetKind::kFlops}, std::pair{"tokens", BudgetKind::kTokens}}) {
      if (!node[key]) continue;
      written.emplace_back(Line(node[key]), key);
      if (++given > 1) continue;
      *kind_out = kind;
      const std::string field = absl::StrCat(prefix, ".", key);
      // D = r·N with N >= 1, and D itself, are counts: at most 2^53. A FLOP budget is
      // bounded by the tokens it gives, which expansion checks per job.
      const bool count = kind != BudgetKind::kFlops;
      const char* per_param = kind == BudgetKind::kTokens ? "" : ": D = r·N";
      Axis(node[key], field, values, [&](const YAML::Node& n, const std::string& f, double* v) {
        if (!Double(n, f, v)) return false;
        if (*v <= 0) {
          Error(Line(n), f, absl::StrCat("must be positive, got ", n.Scalar()));
          return false;
        }
        if (count && *v > static_cast<double>(kMaxCount)) {
          Error(Line(n), f,
                absl::StrCat("must be at most 2^53 = ", kMaxCount, ", got ", n.Scalar(), " (",
                             kCountBound.why, per_param, ")"));
          return false;
        }
        return true;
      });
    }
    const int line = prefix == "budget" ? KeyLine("budget") : Line(node);
    if (given == 0) {
      Error(line, prefix, "no budget; give one of tokens_per_param, flops or tokens");
    } else if (given > 1) {
      std::sort(written.begin(), written.end());
      Error(written[1].first, absl::StrCat(prefix, ".", written[1].second),
            "two budgets given; keep exactly one of tokens_per_param, flops or tokens");
    }
    return given == 1;
  }

  void ParseDesign(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "design")) return;
    CheckKeys(node, "design", {"laws", "flop_tolerance", "fix"});
    DesignSpec& d = spec->design;
    d.line = KeyLine("design");
    if (node["laws"]) {
      const YAML::Node& laws = node["laws"];
      if (!laws.IsSequence()) {
        Error(Line(laws), "design.laws",
              absl::StrCat("expected a list of laws (", absl::StrJoin(LawNames(), ", "),
                           "), possibly empty"));
      } else {
        d.laws_given = true;
        for (size_t i = 0; i < laws.size(); ++i) {
          const std::string field = absl::StrCat("design.laws[", i, "]");
          std::string law;
          if (!String(laws[i], field, &law)) continue;
          if (FindLaw(law) == nullptr) {
            Error(Line(laws[i]), field, absl::StrCat(UnknownLaw(law), DidYouMean(law, LawNames())));
          } else {
            d.laws.push_back(law);
          }
        }
      }
    }
    if (node["fix"]) ParseFix(node["fix"], &d);
    if (node["flop_tolerance"] &&
        Double(node["flop_tolerance"], "design.flop_tolerance", &d.flop_tolerance) &&
        !(d.flop_tolerance > 0 && d.flop_tolerance <= 1)) {
      Error(Line(node["flop_tolerance"]), "design.flop_tolerance",
            absl::StrCat("must be in (0, 1], got ", node["flop_tolerance"].Scalar()));
    }
  }

  // design.fix: {LAW: {PARAMETER: VALUE, ...}, ...}, a known law's reported
  // parameters with finite values (positive for A, B and E).
  void ParseFix(const YAML::Node& node, DesignSpec* d) {
    if (!ExpectMap(node, "design.fix")) return;
    for (const auto& entry : node) {
      const std::string law_name = entry.first.Scalar();
      const std::string field = absl::StrCat("design.fix.", law_name);
      const LawSpec* law = FindLaw(law_name);
      if (law == nullptr) {
        Error(Line(entry.first), field,
              absl::StrCat(UnknownLaw(law_name), DidYouMean(law_name, LawNames())));
        continue;
      }
      if (!ExpectMap(entry.second, field)) continue;
      for (const auto& p : entry.second) {
        const std::string name = p.first.Scalar();
        const std::string pfield = absl::StrCat(field, ".", name);
        const auto it = std::find(law->parameters.begin(), law->parameters.end(), name);
        if (it == law->parameters.end()) {
          Error(Line(p.first), pfield,
                absl::StrCat("law ", law_name, " has no parameter '", name,
                             "' (it has: ", absl::StrJoin(law->parameters, ", "), ")",
                             DidYouMean(name, law->parameters)));
          continue;
        }
        double value = 0;
        if (!Double(p.second, pfield, &value)) continue;
        const bool log_scaled = law->log_scaled[it - law->parameters.begin()];
        if (!std::isfinite(value) || (log_scaled && !(value > 0))) {
          Error(Line(p.second), pfield,
                absl::StrCat("must be a finite number", log_scaled ? " above 0" : "", ", got ",
                             p.second.Scalar()));
          continue;
        }
        d->fix[law_name][name] = value;
      }
    }
  }

  // A number in [lo, hi] (hi excluded when hi_open) at `prefix.key`, if given.
  // Whether `prefix.key` is given and a number in [lo, hi] (hi excluded when
  // hi_open); a value out of range is still written to `out` (and reported).
  bool InRange(const YAML::Node& node, const std::string& prefix, const char* key, double lo,
               double hi, bool hi_open, double* out) {
    if (!node[key]) return false;
    const std::string field = absl::StrCat(prefix, ".", key);
    if (!Double(node[key], field, out)) return false;
    if (*out < lo || *out > hi || (hi_open && *out == hi)) {
      Error(Line(node[key]), field,
            absl::StrCat("must be in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ",
                         node[key].Scalar()));
      return false;
    }
    return true;
  }

  // A family's section read through the parser's own checks (section.h).
  class Section : public SectionReader {
   public:
    Section(SpecParser* parser, const YAML::Node& node, std::string name, nlohmann::json* options)
        : p_(parser), node_(node), name_(std::move(name)), options_(options) {}
    void Keys(const std::vector<std::string>& allowed) override {
      p_->CheckKeys(node_, name_, allowed);
    }
    bool Has(const std::string& key) const override { return static_cast<bool>(node_[key]); }
    std::string Text(const std::string& key) const override {
      const YAML::Node value = node_[key];
      return value && value.IsScalar() ? value.Scalar() : std::string();
    }
    void Integer(const std::string& key, int64_t lo, OptionBound bound) override {
      if (!node_[key]) return;
      static constexpr Bound kBounds[] = {kCountBound, kHiddenBound, kLayersBound, kExpertsBound};
      int64_t value = 0;
      if (p_->IntIn(node_[key], Field(key), lo, kBounds[static_cast<int>(bound)], &value)) {
        (*options_)[key] = value;
      }
    }
    void IntegerList(const std::string& key, int64_t lo, OptionBound bound) override {
      const YAML::Node node = node_[key];
      if (!node) return;
      static constexpr Bound kBounds[] = {kCountBound, kHiddenBound, kLayersBound, kExpertsBound};
      const Bound b = kBounds[static_cast<int>(bound)];
      nlohmann::json values = nlohmann::json::array();
      bool ok = true;
      if (node.IsSequence()) {
        if (node.size() == 0) {
          Error(key, "must not be an empty list");
          return;
        }
        for (size_t i = 0; i < node.size(); ++i) {
          int64_t value = 0;
          if (p_->IntIn(node[i], absl::StrCat(Field(key), "[", i, "]"), lo, b, &value)) {
            if (std::find(values.begin(), values.end(), value) != values.end()) {
              p_->Error(Line(node[i]), absl::StrCat(Field(key), "[", i, "]"),
                        absl::StrCat("repeats ", value));
              ok = false;
            }
            values.push_back(value);
          } else {
            ok = false;
          }
        }
      } else {
        int64_t value = 0;
        ok = p_->IntIn(node, Field(key), lo, b, &value);
        values.push_back(value);
      }
      if (ok) (*options_)[key] = values;
    }
    void Number(const std::string& key, double lo, double hi, bool hi_open) override {
      double value = 0.0;
      if (p_->InRange(node_, name_, key.c_str(), lo, hi, hi_open, &value)) {
        (*options_)[key] = value;
      }
    }
    void Choice(const std::string& key, const std::vector<std::string>& known) override {
      if (!node_[key]) return;
      std::string value;
      if (!p_->String(node_[key], Field(key), &value)) return;
      if (std::find(known.begin(), known.end(), value) == known.end()) {
        Error(key, absl::StrCat("unknown ", key, " '", value, "' (known: ",
                                absl::StrJoin(known, ", "), ")", DidYouMean(value, known)));
        return;
      }
      (*options_)[key] = value;
    }
    void Error(const std::string& key, const std::string& message) override {
      p_->Error(node_[key] ? Line(node_[key]) : Line(node_), Field(key), message);
    }
    nlohmann::json& options() override { return *options_; }

   private:
    std::string Field(const std::string& key) const { return absl::StrCat(name_, ".", key); }

    SpecParser* p_;
    const YAML::Node node_;
    std::string name_;
    nlohmann::json* options_;
  };

  // Each family's section that the file gives, read by the family (section.h).
  void ParseFamilySections(const YAML::Node& root, SweepSpec* spec) {
    for (const SweepFamily& f : SweepFamilies()) {
      if (f.section == nullptr || !root[f.section]) continue;
      const YAML::Node node = root[f.section];
      if (!ExpectMap(node, f.section)) continue;
      nlohmann::json options = nlohmann::json::object();
      Section reader(this, node, f.section, &options);
      f.parse_section(reader);
      spec->family_options[f.section] = std::move(options);
    }
  }

  void ParseTrain(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "train")) return;
    CheckKeys(node, "train",
              {"batch_tokens",
               "micro_batch_tokens",
               "lr",
               "min_lr_ratio",
               "warmup_steps",
               "warmup_fraction",
               "schedule",
               "decay_fraction",
               "decay_shape",
               "cooldown_branches",
               "weight_decay",
               "grad_clip",
               "beta1",
               "beta2",
               "eval_interval",
               "eval_tokens",
               "checkpoint_interval",
               "log_interval",
               "seed",
               "precision",
               "balance_coef",
               "router_coef",
               "min_warmup_steps",
               "final_eval_tokens",
               "lr_scan",
               "recompute",
               "optimizer_sharding"});
    train_node_ = node;
    TrainSpec& t = spec->train;
    ParseTrainBatch(node, &t);
    ParseTrainOptimizer(node, &t);
    ParseTrainSchedule(node, &t);
    if (node["lr_scan"]) ParseLrScan(node["lr_scan"], spec);
    if (node["precision"] && String(node["precision"], "train.precision", &t.precision) &&
        t.precision != "fp32" && t.precision != "bf16") {
      Error(Line(node["precision"]), "train.precision",
            absl::StrCat("unknown precision '", t.precision, "' (known: fp32, bf16)",
                         DidYouMean(t.precision, {"fp32", "bf16"})));
    }
  }

  // train.lr_scan: {factors: [0.5, 1, 2], scales: 2}: factors positive, distinct,
  // 1 among them, at least two; scales at least 1 (and at most the sweep's scales,
  // checked once the scales are read).
  void ParseLrScan(const YAML::Node& node, SweepSpec* spec) {
    TrainSpec& t = spec->train;
    t.lr_scan_line = Line(node);
    if (!ExpectMap(node, "train.lr_scan")) return;
    CheckKeys(node, "train.lr_scan", {"factors", "scales"});
    if (!node["factors"] || !node["factors"].IsSequence()) {
      Error(Line(node), "train.lr_scan.factors",
            "a list of lr multipliers with 1 among them is needed (e.g. [0.5, 1, 2])");
      return;
    }
    Axis(node["factors"], "train.lr_scan.factors", &t.lr_scan_factors,
         [&](const YAML::Node& n, const std::string& f, double* v) {
           if (!Double(n, f, v)) return false;
           if (!(*v > 0.0) || *v > 100.0) {
             Error(Line(n), f, absl::StrCat("an lr factor must be in (0, 100], got ", n.Scalar()));
             return false;
           }
           return true;
         });
    std::set<double> distinct(t.lr_scan_factors.begin(), t.lr_scan_factors.end());
    if (distinct.size() != t.lr_scan_factors.size()) {
      Error(Line(node["factors"]), "train.lr_scan.factors", "the factors must be distinct");
    } else if (distinct.count(1.0) == 0) {
      Error(Line(node["factors"]), "train.lr_scan.factors",
            "1 must be among the factors (the sweep's own lr is the scan's centre)");
    } else if (distinct.size() < 2) {
      Error(Line(node["factors"]), "train.lr_scan.factors",
            "a scan needs at least one factor besides 1");
    }
    t.lr_scan_scales = 1;
    if (node["scales"]) {
      IntIn(node["scales"], "train.lr_scan.scales", 1, kCountBound, &t.lr_scan_scales);
    }
  }

  // Whether `key` of `node` is written as `auto`.
  static bool IsAuto(const YAML::Node& node, const char* key) {
    return node[key] && node[key].IsScalar() && node[key].Scalar() == "auto";
  }

  // train.batch_tokens (required, or auto), micro_batch_tokens, and the two memory
  // settings, recompute and optimizer_sharding.
  void ParseTrainBatch(const YAML::Node& node, TrainSpec* train) {
    TrainSpec& t = *train;
    if (IsAuto(node, "batch_tokens")) {
      t.batch_auto = true;
    } else if (node["batch_tokens"]) {
      Positive(node["batch_tokens"], "train.batch_tokens", &t.batch_tokens, kBatchBound);
    } else {
      Error(Line(node), "train.batch_tokens", "missing; tokens per optimizer step");
    }
    if (IsAuto(node, "micro_batch_tokens")) {
      t.micro_auto = true;
    } else if (node["micro_batch_tokens"]) {
      Positive(node["micro_batch_tokens"], "train.micro_batch_tokens", &t.micro_batch_tokens,
               kBatchBound);
    }
    // A three-way memory setting: its two fixed spellings, or auto.
    auto choice = [&](const char* key, const char* off, const char* on, MemoryChoice* out) {
      if (!node[key]) return;
      const std::string field = absl::StrCat("train.", key);
      std::string v;
      if (!String(node[key], field, &v)) return;
      if (v == off) {
        *out = MemoryChoice::kOff;
      } else if (v == on) {
        *out = MemoryChoice::kOn;
      } else if (v == "auto") {
        *out = MemoryChoice::kAuto;
      } else {
        Error(Line(node[key]), field,
              absl::StrCat("unknown value '", v, "' (known: ", off, ", ", on, ", auto)",
                           DidYouMean(v, {off, on, "auto"})));
      }
    };
    choice("recompute", "false", "true", &t.recompute);
    choice("optimizer_sharding", "none", "zero1", &t.optimizer_sharding);
  }

  // The learning rate (or auto), the optimizer's and router's coefficients, the
  // warm-up, the evaluation, checkpoint and log intervals, and the seed.
  void ParseTrainOptimizer(const YAML::Node& node, TrainSpec* train) {
    TrainSpec& t = *train;
    auto in_range = [&](const char* key, double lo, double hi, bool hi_open, double* out) {
      InRange(node, "train", key, lo, hi, hi_open, out);
    };
    if (IsAuto(node, "lr")) {
      t.lr_auto = true;
    } else {
      in_range("lr", 0.0, 10.0, false, &t.lr);
      if (node["lr"] && t.lr <= 0) Error(Line(node["lr"]), "train.lr", "must be positive");
    }
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
      IntIn(node["warmup_steps"], "train.warmup_steps", 0, kCountBound, &t.warmup_steps);
      if (node["warmup_fraction"]) {
        Error(Line(node["warmup_steps"]), "train.warmup_steps",
              "give warmup_steps or warmup_fraction, not both");
      }
    }
    auto non_negative = [&](const char* key, int64_t* out) {
      if (node[key]) IntIn(node[key], absl::StrCat("train.", key), 0, kCountBound, out);
    };
    non_negative("eval_interval", &t.eval_interval);
    non_negative("min_warmup_steps", &t.min_warmup_steps);
    non_negative("final_eval_tokens", &t.final_eval_tokens);
    non_negative("checkpoint_interval", &t.checkpoint_interval);
    if (node["eval_tokens"]) Positive(node["eval_tokens"], "train.eval_tokens", &t.eval_tokens);
    if (node["log_interval"]) Positive(node["log_interval"], "train.log_interval", &t.log_interval);
    if (node["seed"]) {
      int64_t seed = 0;
      if (Int(node["seed"], "train.seed", &seed) && NonNegative(node["seed"], "train.seed", seed)) {
        t.seed = static_cast<uint64_t>(seed);
      }
    }
  }

  // The schedule and, for wsd only, its decay fraction, decay shape and cooldown
  // branches.
  void ParseTrainSchedule(const YAML::Node& node, TrainSpec* train) {
    TrainSpec& t = *train;
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
    if (node["decay_shape"]) {
      std::string v;
      if (String(node["decay_shape"], "train.decay_shape", &v)) {
        auto shape = ParseDecayShape(v);
        if (shape.ok()) {
          t.decay_shape = *shape;
        } else {
          Error(Line(node["decay_shape"]), "train.decay_shape",
                absl::StrCat(shape.status().message(),
                             DidYouMean(v, {"one_minus_sqrt", "linear", "cosine", "exponential"})));
        }
      }
    }
    if (node["cooldown_branches"]) {
      Scalar(node["cooldown_branches"], "train.cooldown_branches", "true or false",
             &t.cooldown_branches);
    }
    if ((node["decay_shape"] || node["cooldown_branches"] || node["decay_fraction"]) &&
        t.schedule != Schedule::kWsd) {
      const char* key = node["decay_shape"]         ? "decay_shape"
                        : node["cooldown_branches"] ? "cooldown_branches"
                                                    : "decay_fraction";
      Error(Line(node[key]), absl::StrCat("train.", key), "applies to schedule: wsd only");
    }
    if (t.schedule == Schedule::kWsd && t.decay_shape == DecayShape::kExponential &&
        !(t.min_lr_ratio > 0)) {
      Error(Line(node["decay_shape"] ? node["decay_shape"] : node), "train.decay_shape",
            "exponential decays to min_lr_ratio x lr and needs min_lr_ratio > 0");
    }
    if (t.schedule == Schedule::kWsd && !(t.decay_fraction > 0)) {
      Error(Line(node["decay_fraction"] ? node["decay_fraction"] : node), "train.decay_fraction",
            "must be positive for schedule: wsd");
    }
  }

  void ParseResources(const YAML::Node& node, SweepSpec* spec) {
    if (!ExpectMap(node, "resources")) return;
    CheckKeys(node, "resources",
              {"ranks", "max_attempts", "priority", "gpu_memory_gb", "order", "order_target"});
    ResourceSpec& r = spec->resources;
    if (node["gpu_memory_gb"]) {
      r.gpu_memory_line = Line(node["gpu_memory_gb"]);
      if (Double(node["gpu_memory_gb"], "resources.gpu_memory_gb", &r.gpu_memory_gb) &&
          !(r.gpu_memory_gb > 0 && r.gpu_memory_gb <= 1e6)) {
        Error(r.gpu_memory_line, "resources.gpu_memory_gb",
              absl::StrCat("must be a device memory in GB in (0, 1e6], got ",
                           node["gpu_memory_gb"].Scalar()));
      }
    }
    if (node["ranks"]) Positive(node["ranks"], "resources.ranks", &r.ranks, kRanksBound);
    if (node["max_attempts"]) {
      Positive(node["max_attempts"], "resources.max_attempts", &r.max_attempts);
    }
    if (node["priority"] && Int(node["priority"], "resources.priority", &r.priority) &&
        AtMost(node["priority"], "resources.priority", r.priority, kPriorityBound) &&
        r.priority < -kPriorityBound.max) {
      // A cooldown trunk runs at its sweep's priority + 1; ±10^9 leaves room.
      Error(Line(node["priority"]), "resources.priority",
            absl::StrCat("must be at least -10^9, got ", r.priority));
    }
    if (node["order"]) {
      r.order_line = Line(node["order"]);
      std::string order;
      if (String(node["order"], "resources.order", &order)) {
        if (order == "adaptive") {
          r.adaptive_order = true;
        } else if (order != "cheapest") {
          Error(r.order_line, "resources.order",
                absl::StrCat("unknown order '", order, "' (known: cheapest, adaptive)",
                             DidYouMean(order, {"cheapest", "adaptive"})));
        }
      }
    }
    if (const YAML::Node target = node["order_target"]; target) {
      if (!r.adaptive_order) {
        Error(
            Line(target), "resources.order_target",
            "only order: adaptive steers by a target; set resources.order: adaptive or remove it");
      }
      if (ExpectMap(target, "resources.order_target")) {
        CheckKeys(target, "resources.order_target", {"params", "tokens"});
        for (const auto& [key, field] :
             {std::pair<const char*, double*>{"params", &r.order_target_params},
              std::pair<const char*, double*>{"tokens", &r.order_target_tokens}}) {
          const std::string name = absl::StrCat("resources.order_target.", key);
          if (!target[key]) {
            Error(Line(target), name, "missing (give both params and tokens)");
          } else if (Double(target[key], name, field) && !(*field >= 1 && *field <= 1e18)) {
            Error(Line(target[key]), name,
                  absl::StrCat("must be a count in [1, 1e18], got ", target[key].Scalar()));
          }
        }
      }
    }
  }

  // One block's checks against the rest of the file: its scales exist (no scale
  // axis means every scale), it has a budget and the axes of its family, its
  // baselines and memory settings go together, and its batches split.
  void CrossCheckBlock(SweepSpec* spec, const std::vector<std::string>& names,
                       const BlockInfo& info, GridBlock* block_out) {
    GridBlock& block = *block_out;
    const std::string& prefix = info.prefix;
    // A family registered without a sweep side (common/family.h) cannot be expanded.
    std::vector<Family> used = block.baselines;
    used.push_back(block.family);
    for (Family f : used) {
      if (FindSweepFamily(f) == nullptr) {
        Error(info.line, prefix,
              absl::StrCat("family '", std::string(FamilyName(f)),
                           "' has no sweep side in this build of xmod"));
      }
    }
    if (block.scales.empty()) {
      block.scales = names;  // no scale axis: every defined scale
    } else {
      for (size_t i = 0; i < block.scales.size(); ++i) {
        const std::string& name = block.scales[i];
        if (spec->FindScale(name) == nullptr) {
          const YAML::Node n = info.scale_axis.IsSequence() ? info.scale_axis[i] : info.scale_axis;
          Error(Line(n),
                info.scale_axis.IsSequence() ? absl::StrCat(prefix, ".scale[", i, "]")
                                             : prefix + ".scale",
                absl::StrCat("undefined scale '", name, "'", DidYouMean(name, names),
                             " (defined: ", absl::StrJoin(names, ", "), ")"));
        }
      }
    }
    if (!info.has_budget) {
      Error(prefix == "grid" ? 1 : info.line, prefix == "grid" ? "budget" : prefix + ".budget",
            "missing; give one of tokens_per_param, flops or tokens");
    }
    CheckAxes(*spec, block, info);
    // The expert families, mol and gdn recompute nothing yet (docs/memory.md).
    const auto no_recompute = [](Family f) { return !Traits(f).recomputes; };
    if (spec->train.recompute == MemoryChoice::kOn &&
        (no_recompute(block.family) ||
         std::any_of(block.baselines.begin(), block.baselines.end(), no_recompute))) {
      Error(Line(train_node_["recompute"]), "train.recompute",
            "recompute: true is not available for the expert families (moe, deco), mol and gdn "
            "yet; "
            "use auto (which leaves them without) or false");
    }
    if (!block.seeds.empty() && train_node_["seed"]) {
      Error(Line(train_node_["seed"]), "train.seed",
            absl::StrCat("give the seed in train.seed or as the ", prefix, ".seed axis, not both"));
    }
    // Batch shape per (scale, context): a scale's own batch overrides the sweep's.
    for (const std::string& scale_name : block.scales) {
      const ScaleSpec* scale = spec->FindScale(scale_name);
      if (scale == nullptr) continue;
      CheckBatch(*spec, *scale, block.context);
    }
  }

  // The synthetic vocabulary's bound, and every scale's dense model countable.
  void CrossCheckSizes(SweepSpec* spec) {
    if (spec->data.vocab_size > 0 && spec->data.synthetic && spec->data.vocab_size > 65536) {
      Error(spec->LineOf("data.vocab_size", KeyLine("data")), "data.vocab_size",
            "the synthetic source supports at most 65536");
    }
    // Every scale's dense model must be countable; expansion checks the shapes it
    // derives (deeper FLOP-matched models, experts) again.
    for (const ScaleSpec& scale : spec->scales) {
      ModelShape dense;
      dense.d_model = scale.d_model;
      dense.n_heads = scale.n_heads;
      dense.n_layers = scale.n_layers;
      dense.d_ff = scale.d_ff;
      dense.vocab_size = spec->data.vocab_size;
      dense.context = 1;
      if (absl::Status size = CheckModelSize(dense); !size.ok()) {
        Error(scale.line, absl::StrCat("scales.", scale.name),
              absl::StrCat("d_model ", scale.d_model, ", n_layers ", scale.n_layers, ", d_ff ",
                           scale.d_ff, " and vocab_size ", spec->data.vocab_size, ": ",
                           size.message()));
      }
    }
  }

  // Checks that need more than one section; runs only on an otherwise clean file.
  void CrossCheck(SweepSpec* spec) {
    if (spec->train.micro_auto && spec->resources.gpu_memory_gb <= 0) {
      Error(Line(train_node_["micro_batch_tokens"]), "train.micro_batch_tokens",
            "auto chooses the micro-batch from the device memory: declare it as "
            "resources.gpu_memory_gb, or give micro_batch_tokens as a number");
    }
    std::vector<std::string> names;
    for (const ScaleSpec& s : spec->scales) names.push_back(s.name);
    for (size_t b = 0; b < spec->blocks.size(); ++b) {
      CrossCheckBlock(spec, names, block_info_[b], &spec->blocks[b]);
    }
    CrossCheckSizes(spec);
    if (grid_is_map_ && spec->blocks.size() == 1) {
      // One block: the top-level fields hold it (and code may edit them).
      GridBlock& b = spec->blocks[0];
      spec->grid_scales = b.scales;
      spec->grid_sparsity = b.sparsity;
      spec->grid_stride = b.stride;
      spec->grid_context = b.context;
      spec->grid_seeds = b.seeds;
      spec->grid_top_k = b.top_k;
      spec->grid_granularity = b.granularity;
      spec->grid_line = b.line;
      spec->budget_line = b.budget_line;
      spec->match_training_flops = b.match_training_flops;
      spec->blocks.clear();
    }
  }

  // The block's axes against its family's rules (orchestrator/sweep/family/), then
  // the family's own checks and those of its baselines.
  void CheckAxes(const SweepSpec& spec, const GridBlock& block, const BlockInfo& info) {
    const std::string& prefix = info.prefix;
    const SweepFamily& sweep_family = SweepFamilyOf(block.family);
    const std::string family(FamilyName(block.family));
    // The line of the block's axis `key` (where it is to be removed), else the block's.
    const auto axis_line = [&](const char* key) {
      return spec.LineOf(absl::StrCat(prefix, ".", key), info.line);
    };
    if (!sweep_family.expert_axes) {
      std::vector<std::string> owners;
      for (const SweepFamily& f : SweepFamilies()) {
        if (f.expert_axes) owners.emplace_back(FamilyName(f.id));
      }
      for (const auto& [given, key] : {std::pair<bool, const char*>{info.has_top_k, "top_k"},
                                       {info.has_granularity, "granularity"}}) {
        if (given) {
          Error(axis_line(key), prefix + "." + key,
                absl::StrCat("only family ", absl::StrJoin(owners, ", "), " has a ", key,
                             " axis (a moe baseline takes moe.", key, ")"));
        }
      }
    }
    const auto check = [&](AxisRule rule, bool given, const char* key, const std::string& hint) {
      if (rule == AxisRule::kRequired && !given) {
        Error(info.line, absl::StrCat(prefix, ".", key),
              absl::StrCat("family ", family, " needs a ", key, " axis", hint));
      } else if (rule == AxisRule::kFixed && given) {
        Error(axis_line(key), absl::StrCat(prefix, ".", key),
              absl::StrCat("family ", family, " has a fixed ", key, "; remove this axis"));
      } else if (rule == AxisRule::kAbsent && given) {
        Error(axis_line(key), absl::StrCat(prefix, ".", key),
              absl::StrCat("family ", family, " has no ", key, "; remove this axis"));
      }
    };
    check(sweep_family.sparsity_axis, info.has_sparsity, "sparsity", sweep_family.sparsity_hint);
    check(sweep_family.stride_axis, info.has_stride, "stride", "");
    const SpecError error = [this](int line, const std::string& field, const std::string& text) {
      Error(line, field, text);
    };
    if (sweep_family.check_block != nullptr) {
      sweep_family.check_block(spec, block, prefix, info.line, error);
    }
    for (Family baseline : block.baselines) {
      const SweepFamily& b = SweepFamilyOf(baseline);
      if (b.check_as_baseline != nullptr) b.check_as_baseline(spec, block, info.line, error);
    }
  }

  void CheckBatch(const SweepSpec& spec, const ScaleSpec& scale,
                  const std::vector<int64_t>& contexts) {
    const TrainSpec& t = spec.train;
    const bool own_batch = scale.batch_tokens.has_value();
    if (!own_batch && t.batch_auto) return;  // the rule makes a legal batch
    const int64_t batch = own_batch ? *scale.batch_tokens : t.batch_tokens;
    const std::string field = own_batch ? absl::StrCat("scales.", scale.name, ".train.batch_tokens")
                                        : std::string("train.batch_tokens");
    const int line = own_batch ? spec.LineOf(field, scale.line) : Line(train_node_["batch_tokens"]);
    const bool own_micro = scale.micro_batch_tokens.has_value();
    const int64_t micro = own_micro ? *scale.micro_batch_tokens : t.micro_batch_tokens;
    for (int64_t context : contexts) {
      if (!checked_.insert({field, context, micro}).second) continue;
      if (batch % context != 0) {
        Error(line, field,
              absl::StrCat("batch_tokens ", batch, " is not a multiple of context ", context,
                           " (grid.context)"));
        continue;
      }
      const int64_t rows = batch / context;
      if (rows % spec.resources.ranks != 0) {
        Error(line, field,
              absl::StrCat(rows, " sequences of context ", context, " do not split evenly over ",
                           spec.resources.ranks, " ranks (resources.ranks)"));
      }
      if (micro > 0 && micro % context != 0) {
        const std::string micro_field =
            own_micro ? absl::StrCat("scales.", scale.name, ".train.micro_batch_tokens")
                      : std::string("train.micro_batch_tokens");
        Error(own_micro ? spec.LineOf(micro_field, scale.line)
                        : Line(train_node_["micro_batch_tokens"]),
              micro_field,
              absl::StrCat("micro_batch_tokens ", micro, " is not a multiple of context ", context,
                           " (grid.context)"));
      }
    }
  }

  std::string source_;
  std::vector<std::string> errors_;
  std::map<std::string, int> key_lines_;
  std::map<std::string, int> field_lines_;  // see SweepSpec::field_lines
  std::vector<UnknownKey> unknown_keys_;
  std::map<std::string, std::set<std::string>> section_keys_;  // prefix -> the keys it accepts
  int grid_line_ = 1;
  bool top_budget_ = false;
  bool grid_is_map_ = false;
  std::vector<BlockInfo> block_info_;
  std::set<std::tuple<std::string, int64_t, int64_t>> checked_;
  YAML::Node train_node_;
};

}  // namespace

std::pair<double, double> OrderTarget(const ResourceSpec& resources, double largest_dense_params) {
  if (resources.order_target_params > 0) {
    return {resources.order_target_params, resources.order_target_tokens};
  }
  return {4.0 * largest_dense_params, 80.0 * largest_dense_params};
}

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
