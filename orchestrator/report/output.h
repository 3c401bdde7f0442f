// Rendering of result tables for the `xmod` printing commands: an aligned text
// table (the default), CSV (RFC 4180 quoting) or JSON (an array of objects).
#ifndef XMOD_ORCHESTRATOR_REPORT_OUTPUT_H_
#define XMOD_ORCHESTRATOR_REPORT_OUTPUT_H_

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/store/sqlite_store.h"

namespace xmod {

enum class Format { kTable, kCsv, kJson };

// "table", "csv" or "json"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Format> ParseFormat(const std::string& name);

// Prints `result` in `format`. Reals print with 6 significant digits in tables
// and in full (shortest round-trip form) in CSV and JSON. In tables, times (a
// column named *_at, last_seen or wall_time holding seconds since the epoch)
// print as UTC "YYYY-MM-DD HH:MM:SS"; CSV and JSON keep the seconds.
void PrintResult(const QueryResult& result, Format format, std::ostream& out);

// `result` as the JSON PrintResult writes: an array of objects, one per row,
// keyed by column; NULL cells are null.
nlohmann::json ResultJson(const QueryResult& result);

// `xmod results --columns`: keeps the named columns in the order given.
// INVALID_ARGUMENT naming an unknown column and listing the known ones.
absl::Status SelectColumns(const std::vector<std::string>& names, QueryResult* result);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_REPORT_OUTPUT_H_
