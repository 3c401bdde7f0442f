// Tokenizers for `xmod data prepare` (docs/data.md): SentencePiece models from
// Debian's libsentencepiece, trained on a corpus or loaded from a .model file.
// Byte-level ids need no model (common/token_data.h, ByteTokenizer).
#ifndef XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_TOKENIZER_H_
#define XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/token_data.h"

namespace xmod {

// A loaded SentencePiece model. Encode then Decode gives the text back exactly
// for a model trained by TrainSentencePiece (identity normalisation, byte
// fallback); a model from elsewhere may normalise (NFKC, spaces), and
// RoundTrips says whether it did for a given text.
class SentencePieceModel {
 public:
  // NOT_FOUND for a missing file, INVALID_ARGUMENT for one that is not a model.
  static absl::StatusOr<std::unique_ptr<SentencePieceModel>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<SentencePieceModel>> FromSerialized(
      const std::string& bytes);
  ~SentencePieceModel();

  absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const;
  absl::StatusOr<std::string> Decode(const std::vector<uint32_t>& ids) const;
  int64_t vocab_size() const;
  // -1 when the model has none.
  int64_t eos_id() const;
  const std::string& serialized() const { return serialized_; }

  // The tokenizer `xmod data prepare` uses: the model's ids with its EOS after
  // every document; named "sentencepiece:xxh3:HASH" (the model file's XXH3).
  // FAILED_PRECONDITION for a model without an EOS piece.
  absl::StatusOr<TextTokenizer> AsTextTokenizer() const;

 private:
  SentencePieceModel();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string serialized_;
};

struct SentencePieceTraining {
  std::string type = "bpe";  // "bpe" or "unigram"
  int64_t vocab_size = 8000;
};

// Trains a model on `texts` (each split into lines, SentencePiece's sentences),
// with ids 0-2 for <unk>, <s> and </s> (EOS), no padding id, no normalisation or
// whitespace rewriting, and byte fallback, so every text round-trips.
// INVALID_ARGUMENT names --tokenizer-vocab when the corpus cannot fill the vocabulary.
absl::StatusOr<std::unique_ptr<SentencePieceModel>> TrainSentencePiece(
    const std::vector<const std::string*>& texts, const SentencePieceTraining& training);

// `xmod data prepare` with a SentencePiece model: `model_path` loads one;
// otherwise one is trained with `training` on the documents that go to train.bin
// (on all of them when the split is by chunks: the chunks are cut from ids, after
// the model exists; meta.json says which). The model is saved in DIR as
// tokenizer-HASH.model (meta.json "tokenizer_model"), HASH its XXH3.
absl::StatusOr<TokenMeta> PrepareSentencePieceDataset(const PrepareOptions& options,
                                                      const std::string& model_path,
                                                      const SentencePieceTraining& training);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_TOKENIZER_H_
