// Token datasets on disk (sweeps/README.md, `data`): a folder with meta.json,
// train.bin and val.bin, raw little-endian uint16 or uint32 tokens, memory-mapped
// for reading.
// Torch-free, so `xmod data prepare` (orchestrator side) and the worker share it.
#ifndef XMOD_COMMON_TOKEN_DATA_H_
#define XMOD_COMMON_TOKEN_DATA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace xmod {

inline constexpr char kTokenFormat[] = "xmod-tokens";
inline constexpr int kTokenFormatVersion = 1;

struct TokenMeta {
  std::string format = kTokenFormat;
  int version = kTokenFormatVersion;
  std::string dtype = "uint16";  // "uint16" or "uint32"
  int64_t vocab_size = 256;
  std::string tokenizer = "bytes";
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  // How val.bin was held out, in words, e.g. "every 20th document, offset 10: 25 of
  // 500 documents held out"; empty for datasets written before it was recorded.
  std::string val_split;
  // The input files held out whole, in input order (empty for a chunk split).
  std::vector<std::string> val_documents;
  // The tokens' content, "xxh3:" + XXH3-64 of train.bin + XXH3-64 of val.bin (32
  // hex digits), computed once when the dataset is written: part of every job id
  // that trains on it. Empty for datasets from before it was recorded.
  std::string fingerprint;
  // The largest token id in train.bin and val.bin, recorded when written, so that
  // opening the dataset checks it against the vocabulary without reading every
  // token; -1 (unrecorded): Open reads them all.
  int64_t max_token = -1;
  // The id that ends every document, or -1 when documents are not marked.
  int64_t eos_token = -1;
};

// The id width a vocabulary needs: 2 bytes (uint16) up to 65536 ids, else 4.
inline int TokenWidth(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// A whole file mapped read-only (an empty file maps to nothing).
class MappedFile {
 public:
  // NOT_FOUND when the file cannot be opened; INTERNAL when it cannot be mapped.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// "1st", "2nd", "3rd", "4th", "11th", "21st": how split rules are written out.
std::string Ordinal(int64_t n);

// A read-only, memory-mapped token file. Thread-safe after Open.
class TokenFile {
 public:
  // INVALID_ARGUMENT when the size is not a whole number of tokens of `width` bytes.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path, int width);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return size_; }
  // Precondition: 0 <= i < size().
  uint32_t operator[](int64_t i) const {
    return width_ == 2 ? reinterpret_cast<const uint16_t*>(data_)[i]
                       : reinterpret_cast<const uint32_t*>(data_)[i];
  }
  // Copies tokens [start, start + n) into out (int64, LibTorch's index type).
  void Copy(int64_t start, int64_t n, int64_t* out) const;

 private:
  TokenFile() = default;
  std::unique_ptr<MappedFile> file_;
  const unsigned char* data_ = nullptr;
  int64_t size_ = 0;
  int width_ = 2;
};

class TokenDataset {
 public:
  // Opens DIR/meta.json, DIR/train.bin and DIR/val.bin and checks them against each
  // other: format and version, dtype, token counts against file sizes, and (when
  // expected_vocab > 0) that the data's vocabulary fits the model's.
  // NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file and field otherwise.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(const std::string& dir,
                                                            int64_t expected_vocab);
  const TokenMeta& meta() const { return meta_; }
  const TokenFile& train() const { return *train_; }
  const TokenFile& val() const { return *val_; }

 private:
  TokenMeta meta_;
  std::unique_ptr<TokenFile> train_;
  std::unique_ptr<TokenFile> val_;
};

// Turns Brown-corpus "word/tag" tokens into plain words separated by spaces,
// keeping line breaks; `` and '' become ".
std::string StripBrownTags(const std::string& text);

// Writes a dataset folder. Tokens are appended to the train or the validation
// side and streamed to temporary files, their XXH3 computed on the way; Commit
// writes meta.json and renames the three files into place (meta.json last). A
// writer destroyed before Commit removes its temporary files, so a failure leaves
// no partial dataset and an older one in the folder untouched.
class TokenWriter {
 public:
  // The width follows TokenWidth(vocab_size); every appended id must be below it.
  static absl::StatusOr<std::unique_ptr<TokenWriter>> Create(const std::string& dir,
                                                             int64_t vocab_size);
  ~TokenWriter();
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // INVALID_ARGUMENT naming the id and its position in the split when an id is
  // outside the vocabulary; nothing of the call is written then.
  absl::Status Append(bool val, const uint32_t* tokens, size_t n);
  int64_t tokens(bool val) const { return count_[val ? 1 : 0]; }

  // Fills meta's format, dtype, vocab_size, token counts, fingerprint and
  // max_token, writes them and every other field of meta (the fields of `extra`
  // added) to meta.json, and renames. Refuses a side with fewer than 2 tokens.
  absl::StatusOr<TokenMeta> Commit(TokenMeta meta, const nlohmann::json& extra);

 private:
  TokenWriter() = default;
  struct Side;
  std::string dir_;
  int64_t vocab_size_ = 0;
  int width_ = 2;
  int64_t count_[2] = {0, 0};
  int64_t max_token_ = 0;
  std::unique_ptr<Side> side_[2];
  bool committed_ = false;
};

// How a text becomes ids for `xmod data prepare`.
struct TextTokenizer {
  std::string name;        // meta.json "tokenizer"
  int64_t vocab_size = 0;  // every id is below it
  int64_t eos = -1;        // appended after every document when >= 0
  bool bytes = false;      // ids are bytes: the chunk split counts bytes
  std::function<absl::StatusOr<std::vector<uint32_t>>(std::string_view)> encode;
};

// Byte-level ids, vocabulary 256; with `eos`, documents end with id 256 (vocabulary 257).
TextTokenizer ByteTokenizer(bool eos);

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files (documents), concatenated in this order
  std::string output_dir;
  bool strip_tags = false;
  double val_fraction = 0.05;  // about this fraction goes to val.bin (see below)
  bool eos = false;            // byte-level only: end each document with id 256
};

// The validation rule on units (documents or chunks): period
// n = max(2, round(1 / val_fraction)), offset n / 2; unit i is held out when
// i % n == offset. INVALID_ARGUMENT for a fraction outside (0, 1).
absl::StatusOr<int64_t> ValPeriod(double val_fraction);

// Inputs of at most this many bytes per chunk when a split by document is not possible.
inline constexpr int64_t kValChunkBytes = 64 * 1024;

// Writes a byte-level (vocab 256, uint16) dataset. Files are written under
// temporary names and renamed, so a failure leaves no partial dataset.
//
// The validation set is held out by whole documents spread through the corpus,
// not taken from its end (a sorted corpus ends in one genre): with period
// n = max(2, round(1 / val_fraction)) and offset n / 2, input i goes to val.bin when
// i % n == offset, the middle document of every block of n. With fewer than n
// inputs (a single file, say), the concatenated text is cut into chunks of
// min(kValChunkBytes, bytes / n) bytes and chunk j is held out when j % n == offset.
// Train and validation keep the input order. meta.json records the rule
// ("val_split", also returned in TokenMeta::val_split for the CLI to print) and
// the held-out documents ("val_documents").
// INVALID_ARGUMENT for no inputs, a fraction outside (0, 1), or a split that leaves
// fewer than 2 tokens on either side; NOT_FOUND for an unreadable input.
// Returns the metadata written.
absl::StatusOr<TokenMeta> PrepareByteDataset(const PrepareOptions& options);

// The same with any tokenizer: each document is encoded on its own (with the
// tokenizer's EOS after it) and, for a chunk split, the chunks are cut from the
// concatenated ids (of min(kValChunkBytes, ids / n) ids). `extra` is added to
// meta.json (the tokenizer's model, say). `documents` overrides reading
// options.inputs when not null (the text is already in memory).
absl::StatusOr<TokenMeta> PrepareTokenDataset(const PrepareOptions& options,
                                              const TextTokenizer& tokenizer,
                                              const nlohmann::json& extra,
                                              const std::vector<std::string>* documents = nullptr);

// Reads the input files of `options` as documents (Brown tags stripped when asked).
absl::StatusOr<std::vector<std::string>> ReadDocuments(const PrepareOptions& options);

// Entropy in nats of the unigram distribution of a token file: the loss of the
// best model that ignores context, a floor that a trained model should beat.
double UnigramEntropy(const TokenFile& tokens, int64_t vocab_size);

}  // namespace xmod

#endif  // XMOD_COMMON_TOKEN_DATA_H_
