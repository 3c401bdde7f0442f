#include "orchestrator/report/output.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

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
          cells.back().push_back(Cell(row[i], true));
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
