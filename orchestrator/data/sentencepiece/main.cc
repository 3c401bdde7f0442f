// xmod-sentencepiece: `xmod data prepare --tokenizer sentencepiece-*|FILE.model`
// runs in this process of its own, because Debian's libsentencepiece carries
// protobuf-lite, which cannot share a process with the full libprotobuf that
// gRPC brings into `xmod` (both register the same descriptors at load).
// Exit codes: 0 done, 2 bad input (named in the message), 1 anything else.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "orchestrator/data/sentencepiece/tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes an xmod dataset tokenised by SentencePiece (run by xmod data prepare)"};
  xmod::PrepareOptions options;
  std::string model;
  xmod::SentencePieceTraining training;
  app.add_option("--input", options.inputs, "Text files, one document each")->required();
  app.add_option("--output", options.output_dir, "Dataset folder")->required();
  app.add_option("--val-fraction", options.val_fraction, "Validation fraction");
  app.add_flag("--strip-tags", options.strip_tags, "Brown-corpus tags off");
  app.add_option("--model", model, "An existing .model file");
  app.add_option("--train", training.type, "bpe or unigram: train a model here");
  app.add_option("--vocab", training.vocab_size, "Vocabulary of a trained model");
  CLI11_PARSE(app, argc, argv);
  auto meta = xmod::PrepareSentencePieceDataset(options, model, training);
  if (!meta.ok()) {
    std::fprintf(stderr, "%s\n", std::string(meta.status().message()).c_str());
    return meta.status().code() == absl::StatusCode::kInvalidArgument ||
                   meta.status().code() == absl::StatusCode::kNotFound
               ? 2
               : 1;
  }
  std::printf("%s: %lld train and %lld validation tokens (%s, vocab %lld, EOS %lld)\n",
              options.output_dir.c_str(), static_cast<long long>(meta->train_tokens),
              static_cast<long long>(meta->val_tokens), meta->tokenizer.c_str(),
              static_cast<long long>(meta->vocab_size), static_cast<long long>(meta->eos_token));
  std::printf("validation split: %s\n", meta->val_split.c_str());
  return 0;
}
