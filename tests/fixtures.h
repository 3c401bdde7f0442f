// Helpers shared by the tests that read tests/fixtures/.
#ifndef XMOD_TESTS_FIXTURES_H_
#define XMOD_TESTS_FIXTURES_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/paths/paths.h"

namespace xmod::testing {

inline std::string FixturePath(const std::string& relative) {
  return std::string(XMOD_SOURCE_DIR) + "/tests/fixtures/" + relative;
}

// The malformed sweep files, sorted by name.
inline std::vector<std::string> BadSpecNames() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(FixturePath("bad"))) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// What follows "# expect: " on the first line of a fixture.
inline std::string ExpectedError(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  const std::string prefix = "# expect: ";
  return first.rfind(prefix, 0) == 0 ? first.substr(prefix.size()) : "";
}

}  // namespace xmod::testing

#endif  // XMOD_TESTS_FIXTURES_H_
