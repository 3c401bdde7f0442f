// A seam through which tests make the store's writes fail, the way LevelDB's
// fault-injecting Env does for files. The store asks BeforeWrite() before every
// statement that modifies the database; an injected fault aborts the statement
// and so rolls back the whole transaction it belongs to. A fault carries the
// SQLite result code a real failure would have, and the store turns it into a
// status exactly as it turns a real one (SqliteStatusCode in sqlite_store.h).
#ifndef XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_
#define XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xmod {

// SQLite's primary result codes for the failures worth injecting (the values
// of sqlite3.h, which only the store includes).
inline constexpr int kSqliteBusy = 5;      // SQLITE_BUSY: another connection holds the lock
inline constexpr int kSqliteIoErr = 10;    // SQLITE_IOERR: the disk did not take the write
inline constexpr int kSqliteCorrupt = 11;  // SQLITE_CORRUPT: the file is damaged
inline constexpr int kSqliteFull = 13;     // SQLITE_FULL: the disk is full

struct InjectedFault {
  int sqlite_code = kSqliteIoErr;
  std::string message;  // "injected fault at write N (what)"
};

// Thread-safe.
class WriteFaults {
 public:
  // The n-th write from now (1-based) fails with `sqlite_code`; later ones succeed.
  void FailNthWrite(int64_t n, int sqlite_code = kSqliteIoErr);
  // Writes after the first n from now all fail, as if the process had stopped
  // writing at that point (n = 0: every write fails).
  void FailWritesAfter(int64_t n, int sqlite_code = kSqliteIoErr);
  // No more injected failures; the write counter restarts at zero.
  void Clear();

  // Called by the store before each write statement; `what` names it in the
  // message. nullopt: go ahead.
  std::optional<InjectedFault> BeforeWrite(std::string_view what);

  // Writes attempted since the last arming (or Clear), failed ones included.
  int64_t writes() const { return writes_.load(); }

 private:
  std::atomic<int64_t> writes_{0};
  std::atomic<int64_t> fail_nth_{0};     // 0: off
  std::atomic<int64_t> fail_after_{-1};  // -1: off
  std::atomic<int> code_{kSqliteIoErr};
};

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_STORE_WRITE_FAULTS_H_
