# Helpers that keep each folder's CMakeLists.txt to a few lines.

set(XMOD_WARNINGS -Wall -Wextra)

# xmod_library(NAME SOURCES a.cc ... DEPS target ...): one static library per folder.
# Includes are rooted at the repository, so headers are included as "common/foo.h".
function(xmod_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${XMOD_WARNINGS})
endfunction()

# xmod_test(NAME SOURCES a_test.cc ... DEPS target ... LABELS unit ...): a GoogleTest
# binary registered with CTest, one CTest entry per test case.
function(xmod_test name)
  if(NOT XMOD_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${XMOD_WARNINGS})
  target_compile_definitions(${name} PRIVATE
    XMOD_SOURCE_DIR="${PROJECT_SOURCE_DIR}" XMOD_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  include(GoogleTest)
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
