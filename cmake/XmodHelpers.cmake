# Helpers that keep each folder's CMakeLists.txt to a few lines.

set(XMOD_WARNINGS -Wall -Wextra)

# xmod_library(xmod_NAME SOURCES a.cc ... DEPS target ...): one static library per
# folder, also known as xmod::NAME (link by that name: a typo is then a configure
# error, not a silent -lxmod_typo). Includes are rooted at the repository, so
# headers are included as "common/foo.h"; which folder may include which is
# checked by deploy/check-includes.sh against these DEPS.
function(xmod_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  string(REGEX REPLACE "^xmod_" "" short "${name}")
  add_library(xmod::${short} ALIAS ${name})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE ${XMOD_WARNINGS})
  set_property(GLOBAL APPEND PROPERTY XMOD_LIBRARIES ${name})
endfunction()

# The folders of a target's sources, relative to the repository (generated
# sources: relative to the build directory).
function(_xmod_source_dirs target out)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(dirs)
  foreach(src IN LISTS sources)
    if(NOT IS_ABSOLUTE "${src}")
      set(src "${source_dir}/${src}")
    endif()
    get_filename_component(dir "${src}" DIRECTORY)
    file(RELATIVE_PATH rel_source "${PROJECT_SOURCE_DIR}" "${dir}")
    file(RELATIVE_PATH rel_binary "${PROJECT_BINARY_DIR}" "${dir}")
    if(NOT rel_binary MATCHES "^\\.\\.")
      list(APPEND dirs "${rel_binary}")
    else()
      list(APPEND dirs "${rel_source}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# The xmod targets `target` links, directly or not.
function(_xmod_closure target out)
  set(seen)
  set(todo ${target})
  while(todo)
    list(POP_FRONT todo t)
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      set(t ${aliased})
    endif()
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(links ${t} LINK_LIBRARIES)
    foreach(l IN LISTS links)
      if(l MATCHES "^xmod(::|_)" AND TARGET ${l})
        list(APPEND todo ${l})
      endif()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Writes one line per library: its folders, then every folder it may include
# from (its own and those of everything it links). deploy/check-includes.py
# checks the sources against it (a CTest test), so a header is included only by
# a library that really depends on the library owning it.
function(xmod_write_include_rules file)
  get_property(libraries GLOBAL PROPERTY XMOD_LIBRARIES)
  list(APPEND libraries xmod_proto xmod_channel)
  set(text "")
  foreach(lib IN LISTS libraries)
    _xmod_source_dirs(${lib} own)
    _xmod_closure(${lib} closure)
    set(allowed)
    foreach(dep IN LISTS closure)
      _xmod_source_dirs(${dep} dirs)
      list(APPEND allowed ${dirs})
    endforeach()
    list(REMOVE_DUPLICATES allowed)
    list(JOIN own "," own_text)
    list(JOIN allowed " " allowed_text)
    string(APPEND text "${lib} ${own_text} : ${allowed_text}\n")
  endforeach()
  file(WRITE ${file} "${text}")
endfunction()

# xmod_test(NAME SOURCES a_test.cc ... DEPS target ... LABELS unit ...): a GoogleTest
# binary registered with CTest, one CTest entry per test case. One label per binary
# (gtest_discover_tests loses a list's separator): `unit`, `integration`, `e2e`,
# `gpu`, or `unit-release` / `e2e-release` for the tests the Debian 13 leg runs too
# (deploy/test.sh); ctest -L takes a regular expression, so -L unit selects both.
function(xmod_test name)
  if(NOT XMOD_BUILD_TESTS)
    return()
  endif()
  # COST: CTest's estimate of the test's length; a high one starts it first, so
  # that a long test overlaps the others instead of running alone at the end
  # (CTest learns real costs only after a first run, which CI never has).
  # SERIAL: no other test runs beside it (a timing test on a shared machine).
  cmake_parse_arguments(ARG "SERIAL" "COST" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # Paths come from xmod::test_paths, not -D definitions: those would differ
  # between clones and defeat ccache (tests/paths/paths.h).
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} xmod::test_paths GTest::gtest
                                        GTest::gtest_main GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${XMOD_WARNINGS})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  include(GoogleTest)
  if(NOT ARG_COST)
    set(ARG_COST 0)
  endif()
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" COST ${ARG_COST}
                       RUN_SERIAL ${serial} DISCOVERY_TIMEOUT 60)
endfunction()
