// The echo family's traits (echo_family.h): no routing, dense accounting, and its
// options object "echo" checked when a job file is read.
#include "tests/plugins/echo_family.h"

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/job_file.h"

namespace xmod::testing {

namespace {

absl::Status CheckJob(const JobFile& job) {
  const nlohmann::json& o = job.family_options;
  if (!o.contains("depth_factor") || !o.at("depth_factor").is_number() ||
      o.at("depth_factor").get<double>() < 1.0) {
    return absl::InvalidArgumentError("job: field 'echo.depth_factor' must be a number >= 1");
  }
  return absl::OkStatus();
}

}  // namespace

Family EchoFamily() {
  static const Family id = [] {
    FamilyTraits t;
    t.name = "echo";
    t.check_job = &CheckJob;
    t.options_key = "echo";
    t.label = [](const RunFields&) { return std::string("echo (test family)"); };
    absl::StatusOr<Family> registered = RegisterFamily(t);
    if (!registered.ok()) {
      std::cerr << "echo family: " << registered.status() << "\n";
      std::abort();
    }
    return *registered;
  }();
  return id;
}

}  // namespace xmod::testing
