// Token datasets on disk (sweeps/README.md, `data`): a folder with meta.json,
// train.bin and val.bin, raw little-endian uint16 or uint32 tokens, memory-mapped
// for reading.
// Torch-free, so `xmod data prepare` (orchestrator side) and the worker share it.
#ifndef XMOD_COMMON_TOKEN_DATA_H_
#define XMOD_COMMON_TOKEN_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
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
};

// A read-only, memory-mapped token file. Thread-safe after Open.
class TokenFile {
 public:
  // INVALID_ARGUMENT when the size is not a whole number of tokens of `width` bytes.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path, int width);
  ~TokenFile();
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
  const unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
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

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files (documents), concatenated in this order
  std::string output_dir;
  bool strip_tags = false;
  double val_fraction = 0.05;  // about this fraction goes to val.bin (see below)
};

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

// Entropy in nats of the unigram distribution of a token file: the loss of the
// best model that ignores context, a floor that a trained model should beat.
double UnigramEntropy(const TokenFile& tokens, int64_t vocab_size);

}  // namespace xmod

#endif  // XMOD_COMMON_TOKEN_DATA_H_
