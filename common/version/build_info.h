// What built this binary: xmod's version, the git commit (with "-dirty" when the
// tree had uncommitted changes), the build type and the compiler. Every binary
// prints it under --version; worker groups send it, with their libraries and
// device, to the coordinator, which keeps it per attempt (docs/provenance.md).
#ifndef XMOD_COMMON_VERSION_BUILD_INFO_H_
#define XMOD_COMMON_VERSION_BUILD_INFO_H_

#include <nlohmann/json.hpp>
#include <string>

namespace xmod {

struct BuildInfo {
  std::string version;     // the project's, e.g. "0.1.0"
  std::string commit;      // 12 hex digits, "-dirty" appended, or "unknown"
  std::string build_type;  // CMAKE_BUILD_TYPE
  std::string compiler;    // e.g. "GCC 12.2.0"
};

const BuildInfo& ThisBuild();

// {"version", "commit", "build_type", "compiler"}.
nlohmann::json BuildJson(const BuildInfo& b);

// "NAME 0.1.0 (commit 0123456789ab, RelWithDebInfo, GCC 12.2.0)".
std::string VersionLine(const std::string& name);

}  // namespace xmod

#endif  // XMOD_COMMON_VERSION_BUILD_INFO_H_
