// Real storage faults, not injected codes: a filesystem that fills up and one
// that is read-only, made with a size-limited tmpfs (root only; the tests skip
// with a message elsewhere), and a file without write permission (non-root).
// Each fault must give a clear error naming the file, and lose nothing that was
// committed before it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "orchestrator/store/sqlite_store.h"
#include "orchestrator/store/store_test_util.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

using store_test::Dump;
using store_test::Expand;
using store_test::LoadSpec;

std::string IntegrityCheck(SqliteStore& store) {
  auto rows = store.Query("PRAGMA integrity_check");
  if (!rows.ok() || rows->rows.empty()) return "no answer";
  return std::get<std::string>(rows->rows[0][0]);
}

// A tmpfs of `size` mounted on a fresh folder; unmounted (and the folder removed)
// on destruction. `error` says why not when it could not be mounted.
class SmallFilesystem {
 public:
  explicit SmallFilesystem(const std::string& size) : size_(size) {
    char pattern[] = "/tmp/xmod_fs_XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      error = std::strerror(errno);
      return;
    }
    dir = pattern;
    if (::geteuid() != 0) {
      error = "mounting a size-limited tmpfs needs root";
    } else if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size_).c_str()) != 0) {
      error = std::string("mount -t tmpfs: ") + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(dir.c_str(), MNT_DETACH);
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
  bool SetReadOnly(bool read_only) {
    const unsigned long flags = MS_REMOUNT | (read_only ? MS_RDONLY : 0);
    return ::mount("tmpfs", dir.c_str(), "tmpfs", flags, ("size=" + size_).c_str()) == 0;
  }
  // Writes a filler file until the filesystem has no byte left.
  void Fill() {
    std::ofstream filler(dir + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) {
    }
  }
  void Unfill() { std::filesystem::remove(dir + "/filler"); }

  std::string dir, error;

 private:
  std::string size_;
  bool mounted_ = false;
};

std::unique_ptr<SqliteStore> OpenAt(const std::string& path) {
  SqliteStore::Options o;
  o.path = path;
  auto store = SqliteStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(StorageFaults, ADiskThatFillsUpRefusesTheWriteClearlyAndLosesNothingCommitted) {
  SmallFilesystem fs("2m");
  if (!fs.error.empty()) GTEST_SKIP() << "no small filesystem: " << fs.error;
  const std::string path = fs.dir + "/x.db";
  auto store = OpenAt(path);
  ASSERT_NE(store, nullptr);
  const SweepSpec smoke = LoadSpec("sweeps/smoke.yaml");
  ASSERT_TRUE(store->SubmitSweep(smoke, Expand(smoke)).ok());
  ASSERT_TRUE(store->UpsertWorker("w", "host", 1, 1000.0).ok());
  auto grant = store->LeaseNextJob("w", 1, 1000.0, 30.0);
  ASSERT_TRUE(grant.ok() && grant->has_value()) << grant.status();
  const std::string before = Dump(*store);

  fs.Fill();
  // A sweep far larger than anything the journal holds: it needs new blocks.
  const SweepSpec big = LoadSpec("tests/fixtures/lawgrid.yaml");
  const std::vector<ResolvedJob> big_jobs = Expand(big);
  absl::Status full = store->SubmitSweep(big, big_jobs).status();
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr(path));
  EXPECT_THAT(std::string(full.message()), HasSubstr("full"));
  EXPECT_EQ(Dump(*store), before);  // the store still reads, and reads what was committed

  // Space again: the same store takes the write, without a restart.
  fs.Unfill();
  ASSERT_TRUE(store->SubmitSweep(big, big_jobs).ok());
  store.reset();
  store = OpenAt(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(IntegrityCheck(*store), "ok");
  auto sweeps = store->Query("SELECT COUNT(*) FROM sweeps");
  ASSERT_TRUE(sweeps.ok());
  EXPECT_EQ(std::get<int64_t>(sweeps->rows[0][0]), 2);
  auto leased = store->Query("SELECT COUNT(*) FROM jobs WHERE status = 'leased'");
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(std::get<int64_t>(leased->rows[0][0]), 1);  // the lease committed before the fault
}

// A file the process may not write: SQLite would open it read-only without a
// word and fail every write later; the store refuses it when it opens, names
// the file, and changes nothing in it. Readers still read it.
TEST(StorageFaults, AReadOnlyDatabaseIsRefusedWhenOpenedForWritingAndStillReads) {
  SmallFilesystem fs("8m");
  std::string dir = fs.dir;
  const bool root = ::geteuid() == 0;
  if (root && !fs.error.empty()) GTEST_SKIP() << "no filesystem to make read-only: " << fs.error;
  const std::string path = dir + "/x.db";
  std::string before;
  {
    auto store = OpenAt(path);
    ASSERT_NE(store, nullptr);
    const SweepSpec smoke = LoadSpec("sweeps/smoke.yaml");
    ASSERT_TRUE(store->SubmitSweep(smoke, Expand(smoke)).ok());
    before = Dump(*store);
  }
  std::string bytes_before;
  {
    std::ifstream in(path, std::ios::binary);
    bytes_before.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Root ignores file permissions: make the whole filesystem read-only instead.
  if (root) {
    ASSERT_TRUE(fs.SetReadOnly(true)) << std::strerror(errno);
  } else {
    ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  }
  SqliteStore::Options o;
  o.path = path;
  auto writer = SqliteStore::Open(o);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kFailedPrecondition) << writer.status();
  EXPECT_THAT(std::string(writer.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(writer.status().message()), HasSubstr("read-only"));

  o.read_only = true;
  auto reader = SqliteStore::Open(o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(Dump(**reader), before);
  reader->reset();

  if (root) {
    ASSERT_TRUE(fs.SetReadOnly(false));
  } else {
    ::chmod(dir.c_str(), 0755);
    ::chmod(path.c_str(), 0644);
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes_after((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes_after, bytes_before);  // not a byte changed
  if (!root) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xmod
