#include "orchestrator/data/sentencepiece/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace xmod::spm {
namespace {

std::string Message(const sentencepiece::util::Status& s) {
  if (s.ok()) return {};
  const std::string m = s.error_message();
  return m.empty() ? "failed" : m;
}

// Feeds the non-empty lines of the texts to the trainer, without copying them whole.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<const std::string*>& texts) : texts_(texts) { Advance(); }
  bool done() const override { return text_ >= texts_.size(); }
  void Next() override { Advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void Advance() {
    while (text_ < texts_.size()) {
      const std::string& t = *texts_[text_];
      if (pos_ >= t.size()) {
        ++text_;
        pos_ = 0;
        continue;
      }
      size_t end = t.find('\n', pos_);
      if (end == std::string::npos) end = t.size();
      line_.assign(t, pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }
  const std::vector<const std::string*>& texts_;
  size_t text_ = 0;
  size_t pos_ = 0;
  std::string line_;
};

}  // namespace

struct Processor::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Processor::Processor() : impl_(std::make_unique<Impl>()) {}
Processor::~Processor() = default;

std::string Processor::Load(const std::string& serialized_model) {
  return Message(impl_->processor.LoadFromSerializedProto(serialized_model));
}
std::string Processor::Encode(std::string_view text, std::vector<int>* ids) const {
  return Message(impl_->processor.Encode(text, ids));
}
std::string Processor::Decode(const std::vector<int>& ids, std::string* text) const {
  return Message(impl_->processor.Decode(ids, text));
}
int Processor::PieceSize() const { return impl_->processor.GetPieceSize(); }
int Processor::EosId() const { return impl_->processor.eos_id(); }

std::string Train(const std::unordered_map<std::string, std::string>& args,
                  const std::vector<const std::string*>& texts, std::string* serialized) {
  LineIterator lines(texts);
  return Message(sentencepiece::SentencePieceTrainer::Train(args, &lines, serialized));
}

}  // namespace xmod::spm
