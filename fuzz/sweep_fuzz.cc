// libFuzzer target: the sweep parser and the expansion. Any bytes give a spec or
// `file:line: field:` errors; a spec with a small grid expands to jobs or a clear
// error, and every job's file reads back through the worker's reader.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/job_file.h"
#include "orchestrator/sweep/expand.h"
#include "orchestrator/sweep/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<xmod::SweepSpec> spec = xmod::ParseSweepSpec(text, "fuzz.yaml");
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  if (xmod::CountGridPoints(*spec) > 512) return 0;  // keep each input cheap
  absl::StatusOr<std::vector<xmod::ResolvedJob>> jobs = xmod::ExpandSweep(*spec, 512);
  if (!jobs.ok()) return 0;
  for (const xmod::ResolvedJob& job : *jobs) {
    absl::StatusOr<xmod::JobFile> read = xmod::JobFileFromJson(job.ToJson());
    if (!read.ok()) std::abort();  // the orchestrator wrote a file the worker refuses
  }
  return 0;
}
