#include "orchestrator/data/sentencepiece/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/status_macros.h"
#include "orchestrator/data/sentencepiece/sentencepiece_shim.h"

namespace xmod {
namespace {

absl::Status Check(const std::string& error, std::string_view context) {
  if (error.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(context), ": ", error));
}

}  // namespace

struct SentencePieceModel::Impl {
  spm::Processor processor;
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

absl::StatusOr<std::unique_ptr<SentencePieceModel>> SentencePieceModel::Load(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto model = FromSerialized(bytes.str());
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a SentencePiece model: ", model.status().message()));
  }
  return model;
}

absl::StatusOr<std::unique_ptr<SentencePieceModel>> SentencePieceModel::FromSerialized(
    const std::string& bytes) {
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  RETURN_IF_ERROR(Check(model->impl_->processor.Load(bytes), "loading the model"));
  model->serialized_ = bytes;
  return model;
}

absl::StatusOr<std::vector<uint32_t>> SentencePieceModel::Encode(std::string_view text) const {
  std::vector<int> ids;
  RETURN_IF_ERROR(Check(impl_->processor.Encode(text, &ids), "encoding"));
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::string> SentencePieceModel::Decode(const std::vector<uint32_t>& ids) const {
  const std::vector<int> signed_ids(ids.begin(), ids.end());
  std::string text;
  RETURN_IF_ERROR(Check(impl_->processor.Decode(signed_ids, &text), "decoding"));
  return text;
}

int64_t SentencePieceModel::vocab_size() const { return impl_->processor.PieceSize(); }
int64_t SentencePieceModel::eos_id() const { return impl_->processor.EosId(); }

absl::StatusOr<TextTokenizer> SentencePieceModel::AsTextTokenizer() const {
  if (eos_id() < 0) {
    return absl::FailedPreconditionError(
        "the SentencePiece model has no EOS piece (</s>); documents could not be marked");
  }
  StreamChecksum sum;
  sum.Update(serialized_);
  TextTokenizer t;
  t.name = absl::StrCat("sentencepiece:xxh3:", sum.Hex());
  t.vocab_size = vocab_size();
  t.eos = eos_id();
  t.encode = [this](std::string_view text) { return Encode(text); };
  return t;
}

absl::StatusOr<std::unique_ptr<SentencePieceModel>> TrainSentencePiece(
    const std::vector<const std::string*>& texts, const SentencePieceTraining& training) {
  if (training.type != "bpe" && training.type != "unigram") {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer: unknown SentencePiece type '",
                                                   training.type, "' (known: bpe, unigram)"));
  }
  // Byte fallback needs the 256 byte pieces and the three specials.
  if (training.vocab_size < 300 || training.vocab_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer-vocab: ", training.vocab_size, " is outside [300, 1048576]"));
  }
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", training.type},
      {"vocab_size", std::to_string(training.vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"split_digits", "true"},
      {"max_sentence_length", "65536"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  std::string serialized;
  const std::string error = spm::Train(args, texts, &serialized);
  if (!error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer-vocab: training a ", training.type, " model of ", training.vocab_size,
        " pieces failed (a small corpus cannot fill a large vocabulary): ", error));
  }
  return SentencePieceModel::FromSerialized(serialized);
}

absl::StatusOr<TokenMeta> PrepareSentencePieceDataset(const PrepareOptions& options,
                                                      const std::string& model_path,
                                                      const SentencePieceTraining& training) {
  ASSIGN_OR_RETURN(const std::vector<std::string> documents, ReadDocuments(options));
  ASSIGN_OR_RETURN(const int64_t period, ValPeriod(options.val_fraction));
  std::unique_ptr<SentencePieceModel> model;
  nlohmann::json extra = nlohmann::json::object();
  if (!model_path.empty()) {
    ASSIGN_OR_RETURN(model, SentencePieceModel::Load(model_path));
    extra["tokenizer_source"] = std::filesystem::path(model_path).filename().string();
  } else {
    // Trained on the training documents only, so validation text is unseen by
    // the tokenizer as well as by the model.
    const int64_t n = static_cast<int64_t>(documents.size());
    const bool by_document = n >= period;
    std::vector<const std::string*> texts;
    for (int64_t i = 0; i < n; ++i) {
      if (!by_document || i % period != period / 2) texts.push_back(&documents[i]);
    }
    ASSIGN_OR_RETURN(model, TrainSentencePiece(texts, training));
    extra["tokenizer_training"] = {
        {"type", training.type},
        {"vocab_size", training.vocab_size},
        {"trained_on", by_document ? "the training documents"
                                   : "all inputs (a chunk split is cut after tokenising)"}};
  }
  ASSIGN_OR_RETURN(const TextTokenizer tokenizer, model->AsTextTokenizer());
  // The model goes in first, under a name of its content, so meta.json (written
  // last) never names a missing model and an older dataset's model stays.
  StreamChecksum sum;
  sum.Update(model->serialized());
  const std::string model_name = absl::StrCat("tokenizer-", sum.Hex(), ".model");
  extra["tokenizer_model"] = model_name;
  std::error_code ec;
  std::filesystem::create_directories(options.output_dir, ec);
  const std::string model_file = options.output_dir + "/" + model_name;
  const bool existed = std::filesystem::exists(model_file, ec);
  {
    std::ofstream out(model_file + ".tmp", std::ios::binary | std::ios::trunc);
    out << model->serialized();
    if (!out) return absl::InternalError(absl::StrCat(model_file, ".tmp: write failed"));
  }
  std::filesystem::rename(model_file + ".tmp", model_file, ec);
  if (ec) return absl::InternalError(absl::StrCat(model_file, ": ", ec.message()));
  auto meta = PrepareTokenDataset(options, tokenizer, extra, &documents);
  if (!meta.ok() && !existed) std::filesystem::remove(model_file, ec);
  return meta;
}

}  // namespace xmod
