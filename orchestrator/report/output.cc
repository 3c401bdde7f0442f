#include "orchestrator/report/output.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xmod {

absl::StatusOr<Format> ParseFormat(const std::string& name) {
  if (name == "table") return Format::kTable;
  if (name == "csv") return Format::kCsv;
  if (name == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--format: unknown format '", name, "' (known: table, csv, json)"));
}

namespace {

std::string Cell(const Value& v, bool short_reals) {
  if (std::holds_alternative<std::monostate>(v)) return "";
  if (const auto* i = std::get_if<int64_t>(&v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v)) {
    return short_reals ? fmt::format("{:.6g}", *d) : fmt::format("{}", *d);
  }
  return std::get<std::string>(v);
}

// A column of seconds since the epoch (docs/results.md): its name ends in _at,
// or is last_seen or wall_time.
bool TimeColumn(const std::string& name) {
  return (name.size() > 3 && name.compare(name.size() - 3, 3, "_at") == 0) || name == "last_seen" ||
         name == "wall_time";
}

// In a table, a time between 2001 and 2286 reads as UTC "2026-12-05 20:03:31";
// anything else (a duration, say) prints as a number.
std::string TableCell(const Value& v, bool time_column) {
  if (time_column) {
    double t = 0;
    if (const auto* d = std::get_if<double>(&v)) t = *d;
    if (const auto* i = std::get_if<int64_t>(&v)) t = static_cast<double>(*i);
    if (t >= 1e9 && t < 1e10) {
      const std::time_t whole = static_cast<std::time_t>(t);
      std::tm utc{};
      gmtime_r(&whole, &utc);
      char text[32];
      std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &utc);
      return text;
    }
  }
  return Cell(v, true);
}

std::string CsvQuote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

nlohmann::json ResultJson(const QueryResult& result) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : result.rows) {
    nlohmann::json object = nlohmann::json::object();
    for (size_t i = 0; i < row.size(); ++i) {
      const Value& v = row[i];
      nlohmann::json& cell = object[result.columns[i]];
      if (const auto* n = std::get_if<int64_t>(&v)) {
        cell = *n;
      } else if (const auto* d = std::get_if<double>(&v)) {
        cell = *d;
      } else if (const auto* s = std::get_if<std::string>(&v)) {
        cell = *s;
      }
    }
    rows.push_back(std::move(object));
  }
  return rows;
}

absl::Status SelectColumns(const std::vector<std::string>& names, QueryResult* result) {
  std::vector<size_t> picked;
  for (const std::string& name : names) {
    const auto it = std::find(result->columns.begin(), result->columns.end(), name);
    if (it == result->columns.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--columns: no column '", name, "' (known: ", absl::StrJoin(result->columns, ", "), ")"));
    }
    picked.push_back(static_cast<size_t>(it - result->columns.begin()));
  }
  QueryResult out;
  out.columns = names;
  for (const auto& row : result->rows) {
    std::vector<Value> kept;
    for (size_t c : picked) kept.push_back(c < row.size() ? row[c] : Value());
    out.rows.push_back(std::move(kept));
  }
  *result = std::move(out);
  return absl::OkStatus();
}

void PrintResult(const QueryResult& result, Format format, std::ostream& out) {
  switch (format) {
    case Format::kJson: {
      const nlohmann::json rows = ResultJson(result);
      out << rows.dump(2) << "\n";
      return;
    }
    case Format::kCsv: {
      for (size_t i = 0; i < result.columns.size(); ++i) {
        out << (i ? "," : "") << CsvQuote(result.columns[i]);
      }
      out << "\n";
      for (const auto& row : result.rows) {
        for (size_t i = 0; i < row.size(); ++i)
          out << (i ? "," : "") << CsvQuote(Cell(row[i], false));
        out << "\n";
      }
      return;
    }
    case Format::kTable: {
      std::vector<std::vector<std::string>> cells;
      std::vector<size_t> width(result.columns.size());
      for (size_t i = 0; i < result.columns.size(); ++i) width[i] = result.columns[i].size();
      for (const auto& row : result.rows) {
        cells.emplace_back();
        for (size_t i = 0; i < row.size(); ++i) {
          cells.back().push_back(TableCell(row[i], TimeColumn(result.columns[i])));
          width[i] = std::max(width[i], cells.back().back().size());
        }
      }
      auto print_row = [&](const std::vector<std::string>& row) {
        std::string line;
        for (size_t i = 0; i < row.size(); ++i) {
          if (i) line += "  ";
          line += fmt::format("{:<{}}", row[i], width[i]);
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        out << line << "\n";
      };
      print_row(result.columns);
      for (const auto& row : cells) print_row(row);
      return;
    }
  }
}

}  // namespace xmod
