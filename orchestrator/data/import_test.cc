#include "orchestrator/data/import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/token_data.h"
#include "tests/process.h"

namespace xmod {
namespace {

using ::testing::HasSubstr;

class Data : public testing::TempDirTest {
 protected:
  void WriteBytes(const std::string& name, const void* data, size_t n) {
    std::ofstream out(Path(name), std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  template <typename T>
  void WriteIds(const std::string& name, const std::vector<T>& ids) {
    WriteBytes(name, ids.data(), ids.size() * sizeof(T));
  }
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

// Eight documents of GPT-2 ids ending in 50256 (nanoGPT's layout), with a tail
// that lacks the EOS. Every 4th document, offset 2, goes to val.bin whole.
std::vector<std::vector<uint16_t>> GptDocuments() {
  std::vector<std::vector<uint16_t>> docs;
  for (int d = 0; d < 8; ++d) {
    std::vector<uint16_t> doc;
    for (int i = 0; i < 5 + d; ++i) doc.push_back(static_cast<uint16_t>(1000 * d + i));
    doc.push_back(50256);
    docs.push_back(doc);
  }
  docs.back().pop_back();  // the last one ends without EOS
  return docs;
}

std::vector<uint32_t> Concat(const std::vector<std::vector<uint16_t>>& docs,
                             const std::vector<int>& which) {
  std::vector<uint32_t> ids;
  for (int d : which) {
    ids.insert(ids.end(), docs[d].begin(), docs[d].end());
    if (ids.back() != 50256) ids.push_back(50256);
  }
  return ids;
}

TEST_F(Data, NanoGptAndLlmcFilesImportWithTheirDocuments) {
  const auto docs = GptDocuments();
  std::vector<uint16_t> flat;
  for (const auto& d : docs) flat.insert(flat.end(), d.begin(), d.end());
  WriteIds("nanogpt.bin", flat);
  // llm.c: the same ids after a 256 x int32 header.
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagicUint16;
  header[1] = 1;
  header[2] = static_cast<int32_t>(flat.size());
  {
    std::ofstream out(Path("llmc.bin"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(flat.data()),
              static_cast<std::streamsize>(flat.size() * 2));
  }
  for (const std::string file : {"nanogpt.bin", "llmc.bin"}) {
    ImportOptions o;
    o.format = "nanogpt";
    o.inputs = {Path(file)};
    o.output_dir = Path("ds_" + file);
    o.vocab_size = 50257;
    o.eos = 50256;
    o.tokenizer = "gpt2";
    o.val_fraction = 0.25;
    auto meta = ImportTokens(o);
    ASSERT_TRUE(meta.ok()) << file << ": " << meta.status();
    EXPECT_EQ(meta->val_split, "every 4th document, offset 2: 2 of 8 documents held out");
    auto ds = TokenDataset::Open(o.output_dir, 50257);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds.value()->meta().dtype, "uint16");
    EXPECT_EQ(ds.value()->meta().tokenizer, "gpt2");
    EXPECT_EQ(Split(ds.value()->train()), Concat(docs, {0, 1, 3, 4, 5, 7})) << file;
    EXPECT_EQ(Split(ds.value()->val()), Concat(docs, {2, 6})) << file;
    EXPECT_EQ(ds.value()->meta().max_token, 50256);
  }
  // A header whose count disagrees with the file, and a wrong version.
  header[2] += 1;
  WriteBytes("short.bin", header.data(), 1024);
  std::ofstream(Path("short.bin"), std::ios::binary | std::ios::app)
      .write(reinterpret_cast<const char*>(flat.data()),
             static_cast<std::streamsize>(flat.size() * 2));
  ImportOptions o;
  o.format = "nanogpt";
  o.inputs = {Path("short.bin")};
  o.output_dir = Path("bad");
  o.vocab_size = 50257;
  o.eos = 50256;
  auto refused = ImportTokens(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("short.bin: llm.c header says 76 tokens but the file holds 150 bytes"));
  EXPECT_FALSE(std::filesystem::exists(Path("bad") + "/meta.json"));
  EXPECT_FALSE(std::filesystem::exists(Path("bad") + "/train.bin.tmp"));
  // An id at or above the vocabulary is named with its place.
  o.inputs = {Path("nanogpt.bin")};
  o.vocab_size = 7000;
  o.eos = 5;
  refused = ImportTokens(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("nanogpt.bin: id 50256 at element 5 (document 0) is outside --vocab-size"));
}

// llm.c's uint32 layout (Llama 3: magic 20240801, version 7), and a raw uint32
// file with a vocabulary beyond uint16: both keep 32-bit ids.
TEST_F(Data, WideIdsStayUint32) {
  const std::vector<uint32_t> ids = {70000, 5,      128001, 9,      9, 128001, 3,
                                     4,     128001, 1,      128001, 2, 128001};
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagicUint32;
  header[1] = 7;
  header[2] = static_cast<int32_t>(ids.size());
  {
    std::ofstream out(Path("llama.bin"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(ids.data()),
              static_cast<std::streamsize>(ids.size() * 4));
  }
  WriteIds("raw.bin", ids);
  for (const auto& [format, file] : {std::pair{"nanogpt", "llama.bin"}, {"raw", "raw.bin"}}) {
    ImportOptions o;
    o.format = format;
    o.inputs = {Path(file)};
    o.dtype = o.format == "raw" ? "uint32" : "";
    o.output_dir = Path(std::string("ds_") + format);
    o.vocab_size = 128256;
    o.eos = 128001;
    o.val_fraction = 0.5;  // 5 documents: numbers 1 and 3 are held out
    auto meta = ImportTokens(o);
    ASSERT_TRUE(meta.ok()) << format << ": " << meta.status();
    auto ds = TokenDataset::Open(o.output_dir, 128256);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(ds.value()->meta().dtype, "uint32");
    EXPECT_EQ(Split(ds.value()->train()),
              (std::vector<uint32_t>{70000, 5, 128001, 3, 4, 128001, 2, 128001}));
    EXPECT_EQ(Split(ds.value()->val()), (std::vector<uint32_t>{9, 9, 128001, 1, 128001}));
  }
  ImportOptions o;
  o.format = "raw";
  o.inputs = {Path("raw.bin")};
  o.output_dir = Path("nodtype");
  o.vocab_size = 128256;
  o.eos = 128001;
  auto refused = ImportTokens(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--dtype"));
}

// A Megatron indexed dataset: documents of one or two sequences, int32 ids
// (code 4) in one and uint16 (code 8) in another; the documents without an
// end-of-document id get one, the ones with it keep exactly one.
void WriteMegatron(const std::string& prefix, const std::vector<std::vector<int32_t>>& sequences,
                   const std::vector<int64_t>& doc_starts, uint8_t code) {
  const int width = code == 4 ? 4 : 2;
  std::ofstream bin(prefix + ".bin", std::ios::binary);
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  int64_t at = 0;
  for (const auto& seq : sequences) {
    lengths.push_back(static_cast<int32_t>(seq.size()));
    pointers.push_back(at);
    for (int32_t id : seq) {
      if (width == 4) {
        bin.write(reinterpret_cast<const char*>(&id), 4);
      } else {
        const uint16_t v = static_cast<uint16_t>(id);
        bin.write(reinterpret_cast<const char*>(&v), 2);
      }
    }
    at += static_cast<int64_t>(seq.size()) * width;
  }
  std::ofstream idx(prefix + ".idx", std::ios::binary);
  idx.write("MMIDIDX\0\0", 9);
  const uint64_t version = 1, n_seq = sequences.size(), n_doc = doc_starts.size();
  idx.write(reinterpret_cast<const char*>(&version), 8);
  idx.write(reinterpret_cast<const char*>(&code), 1);
  idx.write(reinterpret_cast<const char*>(&n_seq), 8);
  idx.write(reinterpret_cast<const char*>(&n_doc), 8);
  idx.write(reinterpret_cast<const char*>(lengths.data()), static_cast<std::streamsize>(4 * n_seq));
  idx.write(reinterpret_cast<const char*>(pointers.data()),
            static_cast<std::streamsize>(8 * n_seq));
  idx.write(reinterpret_cast<const char*>(doc_starts.data()),
            static_cast<std::streamsize>(8 * n_doc));
}

TEST_F(Data, MegatronIndexedDatasetsImportByTheirDocumentIndex) {
  // Four documents: [s0 s1] [s2] [s3 s4] [s5]; documents 0 and 2 end with EOS 0.
  const std::vector<std::vector<int32_t>> seqs = {{11, 12}, {13, 0}, {21, 22, 23},
                                                  {31},     {32, 0}, {41}};
  for (const uint8_t code : {uint8_t{4}, uint8_t{8}}) {
    const std::string prefix = Path("mega" + std::to_string(code));
    WriteMegatron(prefix, seqs, {0, 2, 3, 5, 6}, code);
    ImportOptions o;
    o.format = "megatron";
    o.inputs = {prefix + ".bin"};
    o.output_dir = Path("ds" + std::to_string(code));
    o.vocab_size = 100;
    o.eos = 0;
    o.val_fraction = 0.5;  // documents 1 and 3 held out
    auto meta = ImportTokens(o);
    ASSERT_TRUE(meta.ok()) << meta.status();
    auto ds = TokenDataset::Open(o.output_dir, 100);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(Split(ds.value()->train()), (std::vector<uint32_t>{11, 12, 13, 0, 31, 32, 0}));
    EXPECT_EQ(Split(ds.value()->val()), (std::vector<uint32_t>{21, 22, 23, 0, 41, 0}));
    EXPECT_EQ(Meta(o.output_dir.substr(dir_.string().size() + 1))["documents"], 4);
  }
  // A broken index: a document index that does not end at the sequence count.
  WriteMegatron(Path("broken"), seqs, {0, 2, 3, 5}, 4);
  ImportOptions o;
  o.format = "megatron";
  o.inputs = {Path("broken")};
  o.output_dir = Path("bad");
  o.vocab_size = 100;
  o.eos = 0;
  auto refused = ImportTokens(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("broken.idx: the document index must start at 0 and end"));
  WriteBytes("nomagic.idx", "NOTANIDX-------------------------------", 38);
  WriteBytes("nomagic.bin", "", 0);
  o.inputs = {Path("nomagic")};
  refused = ImportTokens(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("no MMIDIDX header"));
  EXPECT_FALSE(std::filesystem::exists(Path("bad")));
}

// nanoGPT ships its own val.bin: --val-input keeps it as the validation split.
// With fewer documents than the period the split falls back to chunks of ids.
TEST_F(Data, GivenValidationFilesAndFewDocuments) {
  const auto docs = GptDocuments();
  std::vector<uint16_t> train, val;
  for (int d = 0; d < 6; ++d) train.insert(train.end(), docs[d].begin(), docs[d].end());
  for (int d = 6; d < 8; ++d) val.insert(val.end(), docs[d].begin(), docs[d].end());
  WriteIds("train.bin", train);
  WriteIds("val.bin", val);
  ImportOptions o;
  o.format = "nanogpt";
  o.inputs = {Path("train.bin")};
  o.val_inputs = {Path("val.bin")};
  o.output_dir = Path("given");
  o.vocab_size = 50257;
  o.eos = 50256;
  auto meta = ImportTokens(o);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->val_split, "the documents of val.bin as given");
  auto ds = TokenDataset::Open(o.output_dir, 50257);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(Split(ds.value()->train()), Concat(docs, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Split(ds.value()->val()), Concat(docs, {6, 7}));

  o.val_inputs.clear();
  o.output_dir = Path("chunks");
  o.val_fraction = 0.1;  // period 10 > 6 documents: 6 + 7 + ... + 11 = 51 ids in chunks of 5
  meta = ImportTokens(o);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->val_split,
            "every 10th chunk of 5 tokens, offset 5: 1 of 11 chunks held out (6 documents, "
            "fewer than 10)");
  EXPECT_EQ(meta->val_tokens, 5);
  EXPECT_EQ(meta->train_tokens, 46);
}

}  // namespace
}  // namespace xmod
