# Run with cmake -P: writes OUTPUT, a C++ file defining xmod::SchemaMigrations()
# from the numbered SQL files in INPUTS (a |-separated list, in version order).
string(REPLACE "|" ";" INPUTS "${INPUTS}")
set(body "")
set(version 0)
foreach(file ${INPUTS})
  math(EXPR version "${version} + 1")
  get_filename_component(name "${file}" NAME)
  if(NOT name MATCHES "^0*${version}_")
    message(FATAL_ERROR "schema file ${name} is out of order: expected version ${version}")
  endif()
  file(READ "${file}" sql)
  string(APPEND body "      {${version}, \"${name}\", R\"xmodsql(${sql})xmodsql\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "// Generated from schema/*.sql by cmake/EmbedSql.cmake; do not edit.
#include \"schema/migrations.h\"

namespace xmod {

const std::vector<Migration>& SchemaMigrations() {
  static const std::vector<Migration>* migrations = new std::vector<Migration>{
${body}  };
  return *migrations;
}

}  // namespace xmod
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
