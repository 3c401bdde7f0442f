// The schema migrations of schema/NNNN_name.sql, embedded in the binary at build
// time so that an installed xmod needs no schema files beside it.
#ifndef XMOD_SCHEMA_MIGRATIONS_H_
#define XMOD_SCHEMA_MIGRATIONS_H_

#include <string>
#include <vector>

namespace xmod {

struct Migration {
  int version;       // becomes PRAGMA user_version once applied
  std::string name;  // the file name, for messages
  std::string sql;
};

// In version order, starting at 1.
const std::vector<Migration>& SchemaMigrations();

}  // namespace xmod

#endif  // XMOD_SCHEMA_MIGRATIONS_H_
