#include "common/version/build_info.h"

#include "common/version/build_commit.h"  // generated: XMOD_GIT_COMMIT

namespace xmod {

namespace {

std::string Compiler() {
#if defined(__clang__)
  return "Clang " __clang_version__;
#elif defined(__GNUC__)
  return "GCC " __VERSION__;
#else
  return "unknown compiler";
#endif
}

}  // namespace

const BuildInfo& ThisBuild() {
  static const BuildInfo* info =
      new BuildInfo{XMOD_VERSION, XMOD_GIT_COMMIT, XMOD_BUILD_TYPE, Compiler()};
  return *info;
}

nlohmann::json BuildJson(const BuildInfo& b) {
  return {{"version", b.version},
          {"commit", b.commit},
          {"build_type", b.build_type},
          {"compiler", b.compiler}};
}

std::string VersionLine(const std::string& name) {
  const BuildInfo& b = ThisBuild();
  return name + " " + b.version + " (commit " + b.commit + ", " + b.build_type + ", " + b.compiler +
         ")";
}

}  // namespace xmod
