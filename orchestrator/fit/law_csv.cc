#include "orchestrator/fit/law_csv.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "orchestrator/fit/law_registry.h"

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

namespace {

// Where a CSV column lands in a LawPoint; null for a column no field names (it
// lands in LawPoint::extra).
double* Field(const std::string& column, LawPoint* p) {
  if (column == "N" || column == "N_active") return &p->n;
  if (column == "N_total") return &p->n_total;
  if (column == "D") return &p->d;
  if (column == "loss") return &p->loss;
  if (column == "T") return &p->context;
  if (column == "capacity") return &p->capacity;
  if (column == "stride") return &p->stride;
  if (column == "expansion") return &p->expansion;
  if (column == "block_expansion") return &p->block_expansion;
  if (column == "deltanet_share") return &p->deltanet_share;
  return nullptr;
}

// The checks every law's rows get, on the columns the file has.
absl::Status CheckRow(const LawPoint& p, bool total, bool context, bool capacity) {
  if (total && !(p.n_total >= p.n))
    return absl::InvalidArgumentError("N_total: must be at least N_active");
  if (context && !p.dense() && !(p.context >= 1)) {
    return absl::InvalidArgumentError("T: a sparse run needs T >= 1");
  }
  if (capacity && !(p.capacity > 0 && p.capacity <= 1)) {
    return absl::InvalidArgumentError("capacity: must be in (0, 1]");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<LawPoint>> ReadLawCsv(const std::string& path, const std::string& name) {
  const LawSpec* law = FindLaw(name);
  if (law == nullptr) return absl::InvalidArgumentError(absl::StrCat("--law: ", UnknownLaw(name)));
  ASSIGN_OR_RETURN(const CsvTable t, CsvTable::Read(path));
  const std::string need = absl::StrJoin(law->csv_columns, ",");
  auto missing = [&](const std::string& column) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":1: header: missing column '", column,
                                                   "' (law ", name, " needs ", need, ")"));
  };
  // Read: N (or N_active), D, loss; N_total, T, capacity and stride where present;
  // the law's own columns.
  std::vector<std::pair<std::string, size_t>> columns;
  std::optional<size_t> n_col = t.Column("N_active");
  if (!n_col) n_col = t.Column("N");
  const bool wants_n = std::count(law->csv_columns.begin(), law->csv_columns.end(), "N") > 0;
  if (!n_col) return missing(wants_n ? "N" : "N_active");
  columns.push_back({"N", *n_col});
  for (const char* column : {"D", "loss"}) {
    const std::optional<size_t> c = t.Column(column);
    if (!c) return missing(column);
    columns.push_back({column, *c});
  }
  for (const std::string& column : law->csv_columns) {
    if (column == "N" || column == "N_active" || column == "D" || column == "loss") continue;
    const std::optional<size_t> c = t.Column(column);
    if (!c) return missing(column);
    columns.push_back({column, *c});
  }
  std::vector<std::string> optional = {"N_total", "T", "capacity", "stride"};
  optional.insert(optional.end(), law->csv_optional.begin(), law->csv_optional.end());
  for (const std::string& column : optional) {
    const std::optional<size_t> c = t.Column(column);
    const bool taken = std::any_of(columns.begin(), columns.end(),
                                   [&](const auto& named) { return named.first == column; });
    if (c && !taken) columns.push_back({column, *c});
  }
  auto has = [&](const char* column) {
    return std::any_of(columns.begin(), columns.end(),
                       [&](const auto& named) { return named.first == column; });
  };
  const std::optional<size_t> scale_col = t.Column("scale"), stride_col = t.Column("stride"),
                              seed_col = t.Column("seed");
  std::vector<LawPoint> points;
  for (size_t row = 0; row < t.rows(); ++row) {
    const std::string where = t.Where(row);
    LawPoint p;
    for (const auto& [column, index] : columns) {
      ASSIGN_OR_RETURN(const double value, t.Number(row, index));
      double* field = Field(column, &p);
      if (field != nullptr) {
        *field = value;
      } else {
        p.extra[column] = value;
      }
    }
    if (scale_col) p.scale = t.Text(row, *scale_col);
    for (const char* column : {"N", "D", "loss"}) {
      if (!(*Field(column, &p) > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": ", t.Name(column[0] == 'N' ? *n_col : *t.Column(column)),
                         ": must be positive"));
      }
    }
    absl::Status checked = CheckRow(p, has("N_total"), has("T"), has("capacity"));
    if (checked.ok()) checked = law->check_csv_row(p);
    if (!checked.ok())
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", checked.message()));
    if (stride_col && !(p.stride >= 1 && p.stride == std::floor(p.stride))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": stride: must be a whole number >= 1"));
    }
    p.id = where;
    if (seed_col) {
      // Rows that differ only by their seed are replicates of one configuration
      // (the bootstrap resamples them together; the lack-of-fit test reads their
      // scatter as pure error).
      p.config = absl::StrCat(p.n, "/", p.d, "/", p.NTotal(), "/", p.context, "/", p.capacity, "/",
                              p.stride, "/", p.expansion, "/", p.block_expansion, "/",
                              p.deltanet_share, "/", p.scale);
      for (const auto& [name, value] : p.extra) absl::StrAppend(&p.config, "/", name, "=", value);
    }
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
