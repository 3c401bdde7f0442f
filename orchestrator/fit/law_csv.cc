#include "orchestrator/fit/law_csv.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace xmod {
namespace {

std::string Trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(line, ','))
    out.push_back(Trimmed(std::string_view(c.data(), c.size())));
  return out;
}

}  // namespace

absl::StatusOr<CsvTable> CsvTable::Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  CsvTable t;
  t.path_ = path;
  std::string line;
  if (!std::getline(in, line) || Trimmed(line).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":1: empty file"));
  }
  t.header_ = Cells(line);
  for (int number = 2; std::getline(in, line); ++number) {
    if (Trimmed(line).empty()) continue;
    t.cells_.push_back(Cells(line));
    t.lines_.push_back(number);
  }
  return t;
}

std::optional<size_t> CsvTable::Column(std::string_view name) const {
  auto it = std::find(header_.begin(), header_.end(), name);
  if (it == header_.end()) return std::nullopt;
  return static_cast<size_t>(it - header_.begin());
}

std::string CsvTable::Where(size_t row) const { return absl::StrCat(path_, ":", lines_[row]); }

std::string CsvTable::Text(size_t row, size_t column) const {
  return column < cells_[row].size() ? cells_[row][column] : std::string();
}

absl::StatusOr<double> CsvTable::Number(size_t row, size_t column) const {
  const std::string cell = Text(row, column);
  char* end = nullptr;
  const double value = cell.empty() ? 0.0 : std::strtod(cell.c_str(), &end);
  if (cell.empty() || *end != '\0' || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(row), ": ", header_[column], ": not a finite number"));
  }
  return value;
}

absl::StatusOr<std::vector<LawPoint>> ReadLawCsv(const std::string& path, const std::string& law) {
  ASSIGN_OR_RETURN(const CsvTable t, CsvTable::Read(path));
  std::optional<size_t> n_col = t.Column("N_active");
  if (!n_col) n_col = t.Column("N");
  const std::optional<size_t> d_col = t.Column("D"), loss_col = t.Column("loss"),
                              total_col = t.Column("N_total"), t_col = t.Column("T"),
                              cap_col = t.Column("capacity"), stride_col = t.Column("stride"),
                              scale_col = t.Column("scale"), expansion_col = t.Column("expansion");
  const std::string need = law == "xmod"  ? "N_active,N_total,D,T,capacity,stride,loss"
                           : law == "moe" ? "N_active,D,expansion,loss"
                                          : "N,D,loss";
  auto missing = [&](const char* name) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":1: header: missing column '", name,
                                                   "' (law ", law, " needs ", need, ")"));
  };
  if (!n_col) return missing(law == "dense" ? "N" : "N_active");
  if (!d_col) return missing("D");
  if (!loss_col) return missing("loss");
  if (law == "xmod") {
    if (!total_col) return missing("N_total");
    if (!t_col) return missing("T");
    if (!cap_col) return missing("capacity");
    if (!stride_col) return missing("stride");
  }
  if (law == "moe" && !expansion_col) return missing("expansion");
  std::vector<LawPoint> points;
  for (size_t row = 0; row < t.rows(); ++row) {
    const std::string where = t.Where(row);
    auto read = [&](std::optional<size_t> col, double* target) -> absl::Status {
      if (!col) return absl::OkStatus();
      ASSIGN_OR_RETURN(*target, t.Number(row, *col));
      return absl::OkStatus();
    };
    LawPoint p;
    RETURN_IF_ERROR(read(n_col, &p.n));
    RETURN_IF_ERROR(read(d_col, &p.d));
    RETURN_IF_ERROR(read(loss_col, &p.loss));
    RETURN_IF_ERROR(read(total_col, &p.n_total));
    RETURN_IF_ERROR(read(t_col, &p.context));
    RETURN_IF_ERROR(read(cap_col, &p.capacity));
    RETURN_IF_ERROR(read(stride_col, &p.stride));
    if (law == "moe") RETURN_IF_ERROR(read(expansion_col, &p.expansion));
    if (scale_col) p.scale = t.Text(row, *scale_col);
    for (auto [col, value] :
         {std::pair{n_col, p.n}, std::pair{d_col, p.d}, std::pair{loss_col, p.loss}}) {
      if (!(value > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": ", t.Name(*col), ": must be positive"));
      }
    }
    if (total_col && !(p.n_total >= p.n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": N_total: must be at least N_active"));
    }
    if (t_col && !p.dense() && !(p.context >= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": T: a sparse run needs T >= 1"));
    }
    if (cap_col && !(p.capacity > 0 && p.capacity <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": capacity: must be in (0, 1]"));
    }
    if (law == "moe" && !(p.expansion >= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expansion: must be at least 1 (E / top_k; 1 for a dense run)"));
    }
    if (stride_col && !(p.stride >= 1 && p.stride == std::floor(p.stride))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": stride: must be a whole number >= 1"));
    }
    p.id = where;
    points.push_back(p);
  }
  if (points.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no data rows"));
  return points;
}

absl::StatusOr<std::vector<LawPoint>> ReadChinchillaReference(const std::string& path,
                                                              int drop_highest) {
  ASSIGN_OR_RETURN(const CsvTable t, CsvTable::Read(path));
  size_t columns[3];
  const char* names[3] = {"Model Size", "Training FLOP", "loss"};
  for (int k = 0; k < 3; ++k) {
    const std::optional<size_t> c = t.Column(names[k]);
    if (!c) return absl::InvalidArgumentError(absl::StrCat(path, ":1: no column '", names[k], "'"));
    columns[k] = *c;
  }
  std::vector<LawPoint> points;
  for (size_t row = 0; row < t.rows(); ++row) {
    double values[3];
    for (int k = 0; k < 3; ++k) {
      absl::StatusOr<double> v = t.Number(row, columns[k]);
      if (!v.ok() || !(*v > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(t.Where(row), ": ", names[k], ": not a positive number"));
      }
      values[k] = *v;
    }
    points.push_back(DensePoint(values[0], values[1] / (6.0 * values[0]), values[2]));
  }
  if (drop_highest < 0 || drop_highest >= static_cast<int>(points.size())) {
    return absl::InvalidArgumentError("drop_highest: out of range");
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const LawPoint& a, const LawPoint& b) { return a.loss < b.loss; });
  points.resize(points.size() - drop_highest);
  return points;
}

}  // namespace xmod
