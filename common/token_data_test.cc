#include "common/token_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace xmod {
namespace {

using ::testing::HasSubstr;

class TokenData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("xmod_tokens_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(TokenData, StripBrownTagsKeepsWordsAndLines) {
  EXPECT_EQ(StripBrownTags("\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n\tA/at b/nn\n"),
            "The jury said \" no \" .\nA b\n");
}

TEST_F(TokenData, PreparedBytesRoundTripThroughTheReader) {
  Write("a.txt", "hello world, ");
  Write("b.txt", "this is xmod.\n");
  PrepareOptions options;
  options.inputs = {Path("a.txt"), Path("b.txt")};
  options.output_dir = Path("ds");
  options.val_fraction = 0.25;
  auto meta = PrepareByteDataset(options);
  ASSERT_TRUE(meta.ok()) << meta.status();
  const std::string text = "hello world, this is xmod.\n";  // 27 bytes: 7 val, 20 train
  EXPECT_EQ(meta->val_tokens, 7);
  EXPECT_EQ(meta->train_tokens, 20);
  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::string back;
  for (int64_t i = 0; i < ds.value()->train().size(); ++i) back += char(ds.value()->train()[i]);
  for (int64_t i = 0; i < ds.value()->val().size(); ++i) back += char(ds.value()->val()[i]);
  EXPECT_EQ(back, text);
  std::vector<int64_t> copy(5);
  ds.value()->train().Copy(6, 5, copy.data());
  EXPECT_EQ(copy, (std::vector<int64_t>{'w', 'o', 'r', 'l', 'd'}));
}

TEST_F(TokenData, ReaderRejectsInconsistentFolders) {
  Write("a.txt", std::string(100, 'x'));
  PrepareOptions options{{Path("a.txt")}, Path("ds"), false, 0.1};
  ASSERT_TRUE(PrepareByteDataset(options).ok());
  // Model vocabulary smaller than the data's.
  auto small = TokenDataset::Open(Path("ds"), 128);
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("vocab_size"));
  // A train.bin cut mid-token.
  Write("ds/train.bin", std::string(7, 'a'));
  auto odd = TokenDataset::Open(Path("ds"), 256);
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("not a whole number"));
  // A train.bin of the wrong length.
  Write("ds/train.bin", std::string(8, '\0'));
  auto count = TokenDataset::Open(Path("ds"), 256);
  EXPECT_THAT(std::string(count.status().message()), HasSubstr("meta.json says 90"));
  // An unknown dtype.
  Write("ds/meta.json", R"({"format":"xmod-tokens","version":1,"dtype":"int8","vocab_size":256,)"
                        R"("train_tokens":90,"val_tokens":10})");
  auto dtype = TokenDataset::Open(Path("ds"), 256);
  EXPECT_THAT(std::string(dtype.status().message()), HasSubstr("unknown dtype 'int8'"));
  EXPECT_EQ(TokenDataset::Open(Path("missing"), 256).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TokenData, UnigramEntropyOfTwoEqualSymbolsIsLogTwo) {
  Write("a.txt", "abababababababababab");
  PrepareOptions options{{Path("a.txt")}, Path("ds"), false, 0.1};
  ASSERT_TRUE(PrepareByteDataset(options).ok());
  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok());
  EXPECT_NEAR(UnigramEntropy(ds.value()->train(), 256), std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace xmod
