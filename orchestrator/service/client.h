// The `xmod` command's connection to a running coordinator, with plain structs in
// and out (the CLI never sees protobuf).
#ifndef XMOD_ORCHESTRATOR_SERVICE_CLIENT_H_
#define XMOD_ORCHESTRATOR_SERVICE_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/scheduler/progress.h"
#include "orchestrator/store/rows.h"

namespace xmod {

class RemoteCoordinator {
 public:
  // `token` may be empty; `tls_ca` empty means plaintext.
  static absl::StatusOr<std::unique_ptr<RemoteCoordinator>> Connect(const std::string& address,
                                                                    const std::string& token,
                                                                    const std::string& tls_ca);
  ~RemoteCoordinator();

  // Each error names the RPC; codes are the server's (INVALID_ARGUMENT for a
  // malformed sweep, with its file:line: field lines).
  absl::StatusOr<SubmitResult> Submit(const std::string& yaml, const std::string& source,
                                      bool allow_unidentifiable = false);
  absl::StatusOr<std::vector<SweepSummary>> Status(const std::string& sweep);
  absl::StatusOr<std::vector<JobProgressRow>> ListJobs(const std::string& sweep);
  absl::StatusOr<int64_t> Resume(const std::string& sweep);
  absl::StatusOr<int64_t> Cancel(const std::string& target);

 private:
  struct Impl;
  explicit RemoteCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_SERVICE_CLIENT_H_
