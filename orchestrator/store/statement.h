// The store's prepared statements and the reading of their rows, shared by the
// store's own .cc files (sqlite_store.cc, sqlite_reads.cc): the only code besides
// them that includes sqlite3.h is tests that damage or lock a file on purpose.
#ifndef XMOD_ORCHESTRATOR_STORE_STATEMENT_H_
#define XMOD_ORCHESTRATOR_STORE_STATEMENT_H_

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "orchestrator/store/sqlite_store.h"

namespace xmod {

// A prepared statement, reset before each use. Owned by the store's cache.
class SqliteStore::Statement {
 public:
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~Statement() { sqlite3_finalize(stmt_); }

  sqlite3_stmt* get() { return stmt_; }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Statement& Bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, int v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Bind(int i, std::string_view v) { return Bind(i, std::string(v)); }
  Statement& Bind(int i, const char* v) { return Bind(i, std::string(v)); }
  Statement& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }

 private:
  sqlite3_stmt* stmt_;
};

// The current row of a stepped statement, read by column index.
class SqliteStore::Row {
 public:
  explicit Row(sqlite3_stmt* stmt) : stmt_(stmt) {}
  bool IsNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  // NULL reads as 0, 0.0 or "": for columns that cannot be NULL, or where the row
  // type documents that reading.
  int64_t Int(int i) const { return sqlite3_column_int64(stmt_, i); }
  double Real(int i) const { return sqlite3_column_double(stmt_, i); }
  std::string Text(int i) const {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    return text == nullptr ? std::string() : std::string(text, sqlite3_column_bytes(stmt_, i));
  }
  std::optional<double> MaybeReal(int i) const {
    return IsNull(i) ? std::nullopt : std::optional<double>(Real(i));
  }
  std::optional<std::string> MaybeText(int i) const {
    return IsNull(i) ? std::nullopt : std::optional<std::string>(Text(i));
  }

 private:
  sqlite3_stmt* stmt_;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_STATEMENT_H_
