#include "orchestrator/data/sentencepiece/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/token_data.h"
#include "tests/process.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

class SentencePiece : public testing::TempDirTest {
 protected:
  std::vector<uint32_t> Split(const TokenFile& f) {
    std::vector<uint32_t> ids;
    for (int64_t i = 0; i < f.size(); ++i) ids.push_back(f[i]);
    return ids;
  }
  nlohmann::json Meta(const std::string& ds) {
    std::ifstream in(Path(ds) + "/meta.json");
    return nlohmann::json::parse(in);
  }
};

// A text of made-up words from a small syllable set (so a few hundred pieces
// cover it), with the things exact round trips trip over: runs of spaces,
// leading spaces, newlines, tabs, digits, punctuation and non-ASCII letters.
std::string Document(int seed) {
  static const char* kSyllables[] = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po",
                                     "ve", "zu", "an", "el", "or", "ix", "um", "ba"};
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::string text = seed % 3 == 0 ? "  " : "";
  for (int line = 0; line < 12; ++line) {
    for (int w = 0; w < 14; ++w) {
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < n; ++k) text += kSyllables[rng() % 16];
      text += (rng() % 11 == 0) ? "  " : " ";
    }
    text += std::to_string(rng() % 1000) + (line % 4 == 3 ? ", ü straße\t." : ".");
    text += "\n";
  }
  return text;
}

TEST_F(SentencePiece, TrainedSentencePieceModelsRoundTripEveryText) {
  std::vector<std::string> docs;
  for (int i = 0; i < 30; ++i) docs.push_back(Document(i));
  std::vector<const std::string*> texts;
  for (const std::string& d : docs) texts.push_back(&d);
  for (const std::string type : {"bpe", "unigram"}) {
    SentencePieceTraining training;
    training.type = type;
    training.vocab_size = 400;
    auto model = TrainSentencePiece(texts, training);
    ASSERT_TRUE(model.ok()) << type << ": " << model.status();
    EXPECT_EQ((*model)->vocab_size(), 400) << type;
    EXPECT_EQ((*model)->eos_id(), 2) << type;
    // Texts it did not see, with bytes it never saw (byte fallback).
    for (const std::string& text : {Document(1001), Document(1002) + "\x01 ☃ \r\n end",
                                    std::string("   leading and trailing   ")}) {
      auto ids = (*model)->Encode(text);
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_LT(ids->size(), text.size()) << type << ": the model merges nothing";
      auto back = (*model)->Decode(*ids);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, text) << type;
    }
  }
  SentencePieceTraining too_big;
  too_big.vocab_size = 200000;
  auto refused = TrainSentencePiece(texts, too_big);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--tokenizer-vocab"));
}

// 20 documents at fraction 0.1: documents 5 and 15 are held out whole, each
// document's ids end with the model's EOS, and decoding each train document
// gives its text back. The tokenizer is trained on the 18 training documents.
TEST_F(SentencePiece, SentencePieceDatasetKeepsDocumentsAndEndsEachWithEos) {
  PrepareOptions options;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "doc" + std::to_string(100 + i) + ".txt";
    std::ofstream(Path(name), std::ios::binary) << Document(i);
    options.inputs.push_back(Path(name));
  }
  options.output_dir = Path("ds");
  options.val_fraction = 0.1;
  SentencePieceTraining training;
  training.type = "unigram";
  training.vocab_size = 350;
  auto meta = PrepareSentencePieceDataset(options, "", training);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->eos_token, 2);
  EXPECT_EQ(meta->vocab_size, 350);
  EXPECT_EQ(meta->val_documents, (std::vector<std::string>{"doc105.txt", "doc115.txt"}));
  EXPECT_THAT(meta->tokenizer, HasSubstr("sentencepiece:xxh3:"));
  const nlohmann::json j = Meta("ds");
  EXPECT_EQ(j["eos_token"], 2);
  EXPECT_EQ(j["tokenizer_training"]["trained_on"], "the training documents");
  const std::string model_path = Path("ds") + "/" + j["tokenizer_model"].get<std::string>();
  ASSERT_TRUE(std::filesystem::exists(model_path));
  auto model = SentencePieceModel::Load(model_path);
  ASSERT_TRUE(model.ok()) << model.status();

  auto ds = TokenDataset::Open(Path("ds"), 350);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds.value()->meta().eos_token, 2);
  for (const bool val : {false, true}) {
    const std::vector<uint32_t> ids = Split(val ? ds.value()->val() : ds.value()->train());
    ASSERT_EQ(ids.back(), 2u);
    std::vector<int> expected;
    for (int i = 0; i < 20; ++i) {
      if ((i % 10 == 5) == val) expected.push_back(i);
    }
    size_t start = 0, k = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != 2) continue;
      ASSERT_LT(k, expected.size());
      auto text = (*model)->Decode(std::vector<uint32_t>(ids.begin() + start, ids.begin() + i));
      ASSERT_TRUE(text.ok());
      EXPECT_EQ(*text, Document(expected[k])) << "document " << expected[k];
      start = i + 1;
      ++k;
    }
    EXPECT_EQ(k, expected.size());
  }

  // The same model applied from its file gives the same ids.
  options.output_dir = Path("again");
  auto again = PrepareSentencePieceDataset(options, model_path, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->fingerprint, meta->fingerprint);
  EXPECT_EQ(again->tokenizer, meta->tokenizer);

  auto not_model = PrepareSentencePieceDataset(options, options.inputs[0], {});
  ASSERT_FALSE(not_model.ok());
  EXPECT_THAT(std::string(not_model.status().message()), HasSubstr("not a SentencePiece model"));
}

}  // namespace
}  // namespace xmod
