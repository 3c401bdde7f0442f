// Reads of the cells of a display table (rows.h's QueryResult) for the store's
// own statements and for tests that inspect SqliteStore::Query's answers. The
// rest of xmod gets typed rows from the store and never reads a cell.
#ifndef XMOD_ORCHESTRATOR_STORE_CELLS_H_
#define XMOD_ORCHESTRATOR_STORE_CELLS_H_

#include <cstdint>
#include <string>
#include <variant>

#include "orchestrator/store/rows.h"

namespace xmod {

// They never throw (a std::get of the wrong kind would end the coordinator): a
// number of the other kind is converted; NULL, or text where a number is read,
// reads as 0 or "". Use them on columns that cannot be NULL.
inline int64_t AsInt(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return 0;
}
inline double AsReal(const Value& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return 0.0;
}
inline std::string AsText(const Value& v) {
  if (const auto* t = std::get_if<std::string>(&v)) return *t;
  return std::string();
}
// The cell at (row, column), or NULL when the result has no such cell.
inline const Value& Cell(const QueryResult& result, size_t row, size_t column) {
  static const Value kNull;
  if (row >= result.rows.size() || column >= result.rows[row].size()) return kNull;
  return result.rows[row][column];
}

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_CELLS_H_
