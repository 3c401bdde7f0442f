// A narrow wrapper of Debian's SentencePiece, in a file of its own: its header
// declares its own absl::string_view, which clashes with Abseil's, so nothing
// that includes Abseil may include it. Errors come back as text (empty: none).
#ifndef XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_SENTENCEPIECE_SHIM_H_
#define XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_SENTENCEPIECE_SHIM_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace xmod::spm {

class Processor {
 public:
  Processor();
  ~Processor();
  std::string Load(const std::string& serialized_model);
  std::string Encode(std::string_view text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;
  int PieceSize() const;
  int EosId() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Trains a model on the lines of `texts` with SentencePiece's options `args`;
// the model's bytes go to *serialized.
std::string Train(const std::unordered_map<std::string, std::string>& args,
                  const std::vector<const std::string*>& texts, std::string* serialized);

}  // namespace xmod::spm

#endif  // XMOD_ORCHESTRATOR_DATA_SENTENCEPIECE_SENTENCEPIECE_SHIM_H_
