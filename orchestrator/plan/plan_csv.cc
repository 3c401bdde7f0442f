#include "orchestrator/plan/plan_csv.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "orchestrator/fit/law_csv.h"

namespace xmod {

namespace {

const std::vector<std::string>& Required() {
  static const std::vector<std::string> kColumns = {
      "family", "d_model", "n_layers", "n_heads",       "d_ff",        "mlp",
      "vocab",  "seq_len", "gpus",     "gpus_per_node", "micro_batch", "global_batch",
      "tp",     "pp",      "dp",       "zero_stage",    "recompute",   "precision"};
  return kColumns;
}
const std::vector<std::string>& Optional() {
  static const std::vector<std::string> kColumns = {
      "kv_heads",         "interleave",   "ep",         "cp",     "sequence_parallel", "block",
      "capacity",         "stride",       "experts",    "top_k",  "expert_width",      "shared",
      "shared_width",     "dense_layers", "thin_width", "blocks", "mol_shared",        "mol_top_k",
      "routed_attention", "softmax_every"};
  return kColumns;
}
const std::vector<std::string>& Descriptive() {
  static const std::vector<std::string> kColumns = {"name", "gpu", "source", "note"};
  return kColumns;
}

bool In(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class RowReader {
 public:
  RowReader(const CsvTable& t, size_t row) : t_(t), row_(row) {}

  absl::StatusOr<int64_t> Int(const std::string& column, std::optional<int64_t> fallback = {},
                              int64_t lo = 1) const {
    const std::optional<size_t> c = t_.Column(column);
    if (!c || t_.Text(row_, *c).empty()) {
      if (fallback) return *fallback;
      return Bad(column, c ? "empty (every row needs it)" : "column missing");
    }
    ASSIGN_OR_RETURN(const double v, t_.Number(row_, *c));
    if (v != std::floor(v) || v < static_cast<double>(lo) || v > 9.0e15) {
      return Bad(column,
                 absl::StrCat("must be a whole number >= ", lo, ", got ", t_.Text(row_, *c)));
    }
    return static_cast<int64_t>(v);
  }
  absl::StatusOr<double> Real(const std::string& column,
                              std::optional<double> fallback = {}) const {
    const std::optional<size_t> c = t_.Column(column);
    if (!c || t_.Text(row_, *c).empty()) {
      if (fallback) return *fallback;
      return Bad(column, c ? "empty (every row needs it)" : "column missing");
    }
    ASSIGN_OR_RETURN(const double v, t_.Number(row_, *c));
    if (v <= 0) return Bad(column, absl::StrCat("must be > 0, got ", t_.Text(row_, *c)));
    return v;
  }
  absl::StatusOr<std::string> Word(const std::string& column,
                                   const std::vector<std::string>& allowed,
                                   std::optional<std::string> fallback = {}) const {
    const std::optional<size_t> c = t_.Column(column);
    if (!c || t_.Text(row_, *c).empty()) {
      if (fallback) return *fallback;
      return Bad(column, c ? "empty (every row needs it)" : "column missing");
    }
    const std::string v = t_.Text(row_, *c);
    if (!In(allowed, v)) {
      return Bad(column, absl::StrCat("'", v, "' is not one of ", absl::StrJoin(allowed, ", ")));
    }
    return v;
  }
  absl::Status Bad(const std::string& column, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(t_.Where(row_), ": ", column, ": ", what));
  }
  std::string Text(const std::string& column) const {
    const std::optional<size_t> c = t_.Column(column);
    return c ? t_.Text(row_, *c) : std::string();
  }

 private:
  const CsvTable& t_;
  size_t row_;
};

absl::StatusOr<PlanRow> ReadRow(const CsvTable& t, size_t row, bool measured) {
  const RowReader r(t, row);
  PlanRow out;
  out.where = t.Where(row);
  out.name = r.Text("name").empty() ? r.Text("source") : r.Text("name");
  ASSIGN_OR_RETURN(const std::string family_name,
                   r.Word("family", {"dense", "xmod", "mod", "moe", "deco", "mol", "gdn"}));
  ASSIGN_OR_RETURN(const Family family, ParseFamily(family_name));
  ModelShape& s = out.model.shape;
  s.family = family;
  ASSIGN_OR_RETURN(s.d_model, r.Int("d_model"));
  ASSIGN_OR_RETURN(s.n_layers, r.Int("n_layers"));
  ASSIGN_OR_RETURN(s.n_heads, r.Int("n_heads"));
  ASSIGN_OR_RETURN(s.d_ff, r.Int("d_ff"));
  ASSIGN_OR_RETURN(s.vocab_size, r.Int("vocab"));
  ASSIGN_OR_RETURN(s.context, r.Int("seq_len"));
  if (s.d_model % s.n_heads != 0) {
    return r.Bad("n_heads", absl::StrCat(s.n_heads, " heads do not divide d_model ", s.d_model));
  }
  ASSIGN_OR_RETURN(const std::string mlp, r.Word("mlp", {"gelu", "swiglu"}));
  out.model.mlp = mlp == "gelu" ? MlpKind::kGelu : MlpKind::kSwiglu;
  ASSIGN_OR_RETURN(const std::string block,
                   r.Word("block", {"gpt", "xmod"}, family == Family::kDense ? "gpt" : "xmod"));
  out.model.style = block == "gpt" ? BlockStyle::kGpt : BlockStyle::kXmod;
  if (out.model.style == BlockStyle::kGpt && family != Family::kDense) {
    return r.Bad("block", "gpt is the dense block; family " + family_name + " needs block xmod");
  }
  if (out.model.style == BlockStyle::kXmod && out.model.mlp == MlpKind::kGelu) {
    return r.Bad("mlp", "xmod's block is SwiGLU; gelu needs block gpt");
  }
  ASSIGN_OR_RETURN(out.model.kv_heads, r.Int("kv_heads", int64_t{0}, 0));
  if (out.model.kv_heads > 0 &&
      (s.n_heads % out.model.kv_heads != 0 || out.model.style == BlockStyle::kXmod)) {
    return r.Bad("kv_heads",
                 absl::StrCat(out.model.kv_heads, " must divide n_heads (and needs block gpt)"));
  }
  // The family's own fields.
  if (family == Family::kXmod || family == Family::kMod) {
    ASSIGN_OR_RETURN(s.capacity, r.Real("capacity"));
    ASSIGN_OR_RETURN(s.stride, r.Int("stride"));
    if (s.capacity > 1) return r.Bad("capacity", "must be in (0, 1]");
  } else if (family == Family::kMoe) {
    ASSIGN_OR_RETURN(s.experts.experts, r.Int("experts"));
    ASSIGN_OR_RETURN(s.experts.top_k, r.Int("top_k"));
    ASSIGN_OR_RETURN(s.experts.width, r.Int("expert_width"));
    ASSIGN_OR_RETURN(s.experts.shared, r.Int("shared", int64_t{0}, 0));
    ASSIGN_OR_RETURN(s.experts.dense_layers, r.Int("dense_layers", int64_t{0}, 0));
    if (s.experts.top_k > s.experts.experts) return r.Bad("top_k", "exceeds experts");
  } else if (family == Family::kDeco) {
    ASSIGN_OR_RETURN(s.experts.experts, r.Int("experts"));
    ASSIGN_OR_RETURN(s.experts.width, r.Int("expert_width"));
    ASSIGN_OR_RETURN(s.experts.shared_width, r.Int("shared_width", int64_t{0}, 0));
    ASSIGN_OR_RETURN(s.experts.dense_layers, r.Int("dense_layers", int64_t{1}, 0));
  } else if (family == Family::kMol) {
    ASSIGN_OR_RETURN(s.mol.thin_width, r.Int("thin_width", s.d_model / 4));
    ASSIGN_OR_RETURN(s.mol.blocks, r.Int("blocks", int64_t{5}));
    ASSIGN_OR_RETURN(s.mol.shared, r.Int("mol_shared", int64_t{1}, 0));
    ASSIGN_OR_RETURN(s.mol.top_k, r.Int("mol_top_k", int64_t{2}));
    ASSIGN_OR_RETURN(const std::string routed,
                     r.Word("routed_attention", {"gdn", "softmax"}, std::string("gdn")));
    s.mol.routed_deltanet = routed == "gdn";
    if (s.mol.shared >= s.mol.blocks || s.mol.top_k > s.mol.blocks - s.mol.shared) {
      return r.Bad("mol_top_k", "needs shared < blocks and top_k <= blocks - shared");
    }
  } else if (family == Family::kGdn) {
    ASSIGN_OR_RETURN(s.softmax_every, r.Int("softmax_every", int64_t{0}, 0));
    if (s.softmax_every == 1) return r.Bad("softmax_every", "1 is the dense model");
  }
  Layout& l = out.layout;
  ASSIGN_OR_RETURN(l.gpus, r.Int("gpus"));
  ASSIGN_OR_RETURN(l.gpus_per_node, r.Int("gpus_per_node"));
  ASSIGN_OR_RETURN(l.micro_batch, r.Int("micro_batch"));
  ASSIGN_OR_RETURN(l.global_batch, r.Int("global_batch"));
  ASSIGN_OR_RETURN(l.tp, r.Int("tp"));
  ASSIGN_OR_RETURN(l.pp, r.Int("pp"));
  ASSIGN_OR_RETURN(l.dp, r.Int("dp"));
  ASSIGN_OR_RETURN(l.ep, r.Int("ep", int64_t{1}));
  ASSIGN_OR_RETURN(l.cp, r.Int("cp", int64_t{1}));
  ASSIGN_OR_RETURN(l.interleave, r.Int("interleave", int64_t{1}));
  ASSIGN_OR_RETURN(const int64_t zero, r.Int("zero_stage", std::nullopt, 0));
  if (zero > 3) return r.Bad("zero_stage", "must be 0, 1, 2 or 3");
  l.zero_stage = static_cast<int>(zero);
  ASSIGN_OR_RETURN(const int64_t sp, r.Int("sequence_parallel", int64_t{1}, 0));
  if (sp > 1) return r.Bad("sequence_parallel", "must be 0 or 1");
  l.sequence_parallel = sp == 1;
  ASSIGN_OR_RETURN(const std::string recompute, r.Word("recompute", {"none", "selective", "full"}));
  l.recompute = recompute == "none"        ? RecomputeMode::kNone
                : recompute == "selective" ? RecomputeMode::kSelective
                                           : RecomputeMode::kFull;
  ASSIGN_OR_RETURN(const std::string precision,
                   r.Word("precision", {"bf16", "fp16", "fp8", "fp32"}));
  l.precision = precision == "bf16"   ? Precision::kBf16
                : precision == "fp16" ? Precision::kFp16
                : precision == "fp8"  ? Precision::kFp8
                                      : Precision::kFp32;
  if (absl::Status s2 = CheckLayout(out.model, l); !s2.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(out.where, ": layout: ", s2.message()));
  }
  if (absl::Status s2 = CheckModelSize(s); !s2.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(out.where, ": model: ", s2.message()));
  }
  if (measured) {
    ASSIGN_OR_RETURN(out.tokens_per_s, r.Real("tokens_per_s"));
  }
  return out;
}

}  // namespace

std::vector<std::string> PlanRequiredColumns() { return Required(); }

absl::StatusOr<std::vector<PlanRow>> ReadPlanRows(const std::string& path, bool measured) {
  ASSIGN_OR_RETURN(const CsvTable t, CsvTable::Read(path));
  std::map<std::string, int> seen;
  for (const std::string& column : Required()) {
    if (!t.Column(column)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":1: header: missing column '", column,
                                                     "' (needs ", absl::StrJoin(Required(), ","),
                                                     measured ? ",tokens_per_s" : "", ")"));
    }
  }
  for (size_t c = 0; c < t.columns(); ++c) {
    const std::string& name = t.Name(c);
    if (!seen.emplace(name, 1).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":1: header: column '", name, "' appears twice"));
    }
    const bool known = In(Required(), name) || In(Optional(), name) || In(Descriptive(), name) ||
                       name == "tokens_per_s";
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":1: header: unknown column '", name,
          "' (docs/planner.md lists the columns; descriptive text goes in name, gpu, source or "
          "note)"));
    }
  }
  if (measured && !t.Column("tokens_per_s")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: header: missing column 'tokens_per_s' (the measured throughput)"));
  }
  if (!measured && t.Column("tokens_per_s")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ":1: header: column 'tokens_per_s' is a measurement; `plan predict` reads "
                     "configurations (use `plan calibrate --measured` for measured runs)"));
  }
  if (t.rows() == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no rows"));
  std::vector<PlanRow> rows;
  for (size_t row = 0; row < t.rows(); ++row) {
    ASSIGN_OR_RETURN(PlanRow r, ReadRow(t, row, measured));
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace xmod
