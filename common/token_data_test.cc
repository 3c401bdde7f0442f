#include "common/token_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

// Two inputs are fewer than the period 4 of a 0.25 fraction, so the text is cut
// into 27 / 4 = 6-byte chunks and chunk 2 of every 4 is held out.
TEST_F(TokenData, PreparedBytesRoundTripThroughTheReader) {
  Write("a.txt", "hello world, ");
  Write("b.txt", "this is xmod.\n");
  PrepareOptions options;
  options.inputs = {Path("a.txt"), Path("b.txt")};
  options.output_dir = Path("ds");
  options.val_fraction = 0.25;
  auto meta = PrepareByteDataset(options);
  ASSERT_TRUE(meta.ok()) << meta.status();
  const std::string text = "hello world, this is xmod.\n";  // 27 bytes: chunk [12, 18) is val
  EXPECT_EQ(meta->val_tokens, 6);
  EXPECT_EQ(meta->train_tokens, 21);
  EXPECT_EQ(meta->val_split,
            "every 4th chunk of 6 bytes, offset 2: 1 of 5 chunks held out (2 input files, fewer "
            "than 4)");
  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::string train, val;
  for (int64_t i = 0; i < ds.value()->train().size(); ++i) train += char(ds.value()->train()[i]);
  for (int64_t i = 0; i < ds.value()->val().size(); ++i) val += char(ds.value()->val()[i]);
  EXPECT_EQ(val, text.substr(12, 6));
  EXPECT_EQ(train, text.substr(0, 12) + text.substr(18));
  EXPECT_EQ(ds.value()->meta().val_split, meta->val_split);
  std::vector<int64_t> copy(5);
  ds.value()->train().Copy(6, 5, copy.data());
  EXPECT_EQ(copy, (std::vector<int64_t>{'w', 'o', 'r', 'l', 'd'}));
}

// A sorted corpus (Brown: ca01 ... cr09) ends in one genre; holding out its tail
// would validate on a genre never trained on. Held-out documents must come from
// the beginning, the middle and the end, and meta.json must say how.
TEST_F(TokenData, ValidationHoldsOutWholeDocumentsInterleavedThroughTheCorpus) {
  PrepareOptions options;
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "doc" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    texts.push_back("[" + name + "] some text of document " + std::to_string(i) + ".\n");
    Write(name, texts.back());
    options.inputs.push_back(Path(name));
  }
  options.output_dir = Path("ds");
  options.val_fraction = 0.1;  // period 10, offset 5: documents 5, 15, 25, 35
  auto meta = PrepareByteDataset(options);
  ASSERT_TRUE(meta.ok()) << meta.status();
  // Recorded by file name: a dataset does not record the folder it was built in.
  EXPECT_EQ(meta->val_documents, (std::vector<std::string>{"doc05", "doc15", "doc25", "doc35"}));
  EXPECT_EQ(meta->val_split, "every 10th document, offset 5: 4 of 40 documents held out");
  std::string expected_train, expected_val;
  for (int i = 0; i < 40; ++i) (i % 10 == 5 ? expected_val : expected_train) += texts[i];
  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::string train, val;
  for (int64_t i = 0; i < ds.value()->train().size(); ++i) train += char(ds.value()->train()[i]);
  for (int64_t i = 0; i < ds.value()->val().size(); ++i) val += char(ds.value()->val()[i]);
  EXPECT_EQ(val, expected_val);
  EXPECT_EQ(train, expected_train);  // the last documents (36-39) train
  nlohmann::json j = nlohmann::json::parse(std::ifstream(Path("ds/meta.json")));
  EXPECT_EQ(j["val_split"], meta->val_split);
  EXPECT_EQ(j["val_unit"], "document");
  EXPECT_EQ(j["val_period"], 10);
  EXPECT_EQ(j["val_offset"], 5);
  EXPECT_EQ(j["val_documents"].size(), 4u);
  EXPECT_EQ(ds.value()->meta().val_documents, meta->val_documents);
}

// The fingerprint and the largest id are written once, at prepare time: the same
// text gives the same fingerprint, one changed byte another; with max_token
// recorded, opening checks it instead of reading every id, and refuses a dataset
// whose recorded maximum is outside its vocabulary.
TEST_F(TokenData, PrepareRecordsAFingerprintAndTheLargestId) {
  Write("a.txt", "hello world, ");
  Write("b.txt", "this is xmod~\n");
  PrepareOptions options;
  options.inputs = {Path("a.txt"), Path("b.txt")};
  options.output_dir = Path("ds");
  options.val_fraction = 0.25;
  auto first = PrepareByteDataset(options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->fingerprint, ::testing::MatchesRegex("xxh3:[0-9a-f]{32}"));
  EXPECT_EQ(first->max_token, '~');
  options.output_dir = Path("same");
  EXPECT_EQ(PrepareByteDataset(options)->fingerprint, first->fingerprint);
  Write("b.txt", "this is xmod!\n");
  options.output_dir = Path("changed");
  auto changed = PrepareByteDataset(options);
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(changed->fingerprint, first->fingerprint);
  EXPECT_EQ(changed->max_token, 'x');

  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds.value()->meta().fingerprint, first->fingerprint);
  EXPECT_EQ(ds.value()->meta().max_token, '~');
  nlohmann::json j = nlohmann::json::parse(std::ifstream(Path("ds/meta.json")));
  j["vocab_size"] = 100;  // below '~' (126): the recorded maximum says so
  std::ofstream(Path("ds/meta.json")) << j.dump();
  auto refused = TokenDataset::Open(Path("ds"), 256);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("meta.json: max_token: 126 is outside vocab_size 100"));
  j.erase("max_token");  // unrecorded: every id is read, and the first one out is named
  std::ofstream(Path("ds/meta.json")) << j.dump();
  refused = TokenDataset::Open(Path("ds"), 256);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("is outside vocab_size 100"));
}

// One input file cannot be split by document: 64 KiB chunks, every 20th held out.
TEST_F(TokenData, ASingleFileIsSplitIntoInterleavedChunks) {
  std::string text(2 << 20, ' ');  // 2 MiB: 32 chunks of 64 KiB, chunks 10 and 30 held out
  uint64_t state = 1;
  for (char& c : text) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    c = static_cast<char>('a' + (state >> 59));
  }
  Write("one.txt", text);
  PrepareOptions options{{Path("one.txt")}, Path("ds"), false, 0.05};
  auto meta = PrepareByteDataset(options);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->val_split,
            "every 20th chunk of 65536 bytes, offset 10: 2 of 32 chunks held out (1 input file, "
            "fewer than 20)");
  EXPECT_TRUE(meta->val_documents.empty());
  auto ds = TokenDataset::Open(Path("ds"), 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t chunk = kValChunkBytes;
  ASSERT_EQ(ds.value()->val().size(), 2 * chunk);
  std::string val;
  for (int64_t i = 0; i < ds.value()->val().size(); ++i) val += char(ds.value()->val()[i]);
  EXPECT_EQ(val, text.substr(10 * chunk, chunk) + text.substr(30 * chunk, chunk));
  EXPECT_EQ(ds.value()->train().size(), 30 * chunk);
  EXPECT_EQ(char(ds.value()->train()[10 * chunk]), text[11 * chunk]);  // chunk 11 follows 9
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
