#include "common/checksum.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "common/id.h"

namespace xmod {
namespace {

// The file's bytes, `size` of them from a fixed generator.
std::string Bytes(size_t size) {
  std::mt19937_64 gen(7);
  std::string s(size, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

class Checksum : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("xmod-checksum-" + std::to_string(::getpid()) + "-" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::filesystem::path dir_;
};

TEST(StreamChecksumTest, IsXxh3OfTheConcatenationWhateverThePieces) {
  StreamChecksum empty;
  EXPECT_EQ(empty.Digest(), 0x2D06800538D394C2ULL);  // XXH3_64bits(""), xxHash's test vector
  EXPECT_EQ(empty.Hex(), "2d06800538d394c2");
  const std::string bytes = Bytes(1000003);
  StreamChecksum pieces;
  for (size_t at = 0, step = 1; at < bytes.size(); at += step, step = step * 3 + 1) {
    pieces.Update(std::string_view(bytes).substr(at, step));
  }
  EXPECT_EQ(pieces.Digest(), XXH3_64bits(bytes.data(), bytes.size()));
}

TEST_F(Checksum, AFileIsHashedInBlocksAndAFlippedByteChangesIt) {
  // Three blocks and a part: the block boundaries must not show in the digest.
  std::string bytes = Bytes((size_t{3} << 20) + 12345);
  const std::string path = Write("a.bin", bytes);
  auto sum = FileChecksum(path);
  ASSERT_TRUE(sum.ok()) << sum.status();
  StreamChecksum whole;
  whole.Update(bytes);
  EXPECT_EQ(*sum, whole.Hex());
  bytes[(size_t{2} << 20) + 5] ^= 0x01;
  auto flipped = FileChecksum(Write("a.bin", bytes));
  ASSERT_TRUE(flipped.ok());
  EXPECT_NE(*flipped, *sum);
}

TEST_F(Checksum, TheLegacyChecksumIsFnvOfTheWholeFile) {
  const std::string bytes = Bytes((size_t{1} << 20) + 77);
  auto sum = LegacyFileChecksum(Write("b.bin", bytes));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, HexId(bytes));
  EXPECT_EQ(Fnv1a64Continue(Fnv1a64("foo"), "bar"), Fnv1a64("foobar"));
}

TEST_F(Checksum, AMissingFileIsNotFoundAndNamed) {
  const std::string path = (dir_ / "missing.bin").string();
  auto sum = FileChecksum(path);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(sum.status().message().find(path), std::string::npos);
  EXPECT_EQ(LegacyFileChecksum(path).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace xmod
