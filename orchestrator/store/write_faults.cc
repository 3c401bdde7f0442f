#include "orchestrator/store/write_faults.h"

#include "absl/strings/str_cat.h"

namespace xmod {

void WriteFaults::FailNthWrite(int64_t n, int sqlite_code) {
  code_ = sqlite_code;
  writes_ = 0;
  fail_after_ = -1;
  fail_nth_ = n;
}

void WriteFaults::FailWritesAfter(int64_t n, int sqlite_code) {
  code_ = sqlite_code;
  writes_ = 0;
  fail_nth_ = 0;
  fail_after_ = n;
}

void WriteFaults::Clear() {
  writes_ = 0;
  fail_nth_ = 0;
  fail_after_ = -1;
}

std::optional<InjectedFault> WriteFaults::BeforeWrite(std::string_view what) {
  const int64_t n = ++writes_;
  const int64_t after = fail_after_.load();
  if (n == fail_nth_.load() || (after >= 0 && n > after)) {
    return InjectedFault{code_.load(),
                         absl::StrCat("injected fault at write ", n, " (", std::string(what), ")")};
  }
  return std::nullopt;
}

}  // namespace xmod
