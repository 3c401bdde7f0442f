// libFuzzer target: the job file reader. Any bytes give a job or an error, never a
// crash or an exception; a job that reads writes back to JSON that reads as the
// same job.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/job_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<xmod::JobFile> job = xmod::ParseJobFile(text, "fuzz");
  if (!job.ok()) return 0;
  absl::StatusOr<xmod::JobFile> again = xmod::JobFileFromJson(xmod::ToJson(*job));
  if (!again.ok() || xmod::CanonicalJson(*again) != xmod::CanonicalJson(*job)) std::abort();
  return 0;
}
