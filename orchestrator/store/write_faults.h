// A seam through which tests make the store's writes fail, the way LevelDB's
// fault-injecting Env does for files. The store asks BeforeWrite() before every
// statement that modifies the database; a non-OK answer aborts the statement and
// so rolls back the whole transaction it belongs to.
#ifndef XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_
#define XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_

#include <atomic>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace xmod {

// Thread-safe.
class WriteFaults {
 public:
  // The n-th write from now (1-based) fails with UNAVAILABLE; later ones succeed.
  void FailNthWrite(int64_t n);
  // Writes after the first n from now all fail, as if the process had stopped
  // writing at that point (n = 0: every write fails).
  void FailWritesAfter(int64_t n);
  // No more injected failures; the write counter restarts at zero.
  void Clear();

  // Called by the store before each write statement; `what` names it in the error.
  absl::Status BeforeWrite(std::string_view what);

  // Writes attempted since the last arming (or Clear), failed ones included.
  int64_t writes() const { return writes_.load(); }

 private:
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> fail_nth_{0};     // 0: off
  std::atomic<int64_t> fail_after_{-1};  // -1: off
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_
