#include "worker/data/batches.h"

#include <algorithm>

#include "common/status_macros.h"

namespace xmod {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

class DatasetSource : public TokenSource {
 public:
  explicit DatasetSource(std::unique_ptr<TokenDataset> dataset) : dataset_(std::move(dataset)) {}
  int64_t vocab_size() const override { return dataset_->meta().vocab_size; }
  int64_t train_size() const override { return dataset_->train().size(); }
  int64_t val_size() const override { return dataset_->val().size(); }
  void CopyTrain(int64_t start, int64_t n, int64_t* out) const override {
    dataset_->train().Copy(start, n, out);
  }
  void CopyVal(int64_t start, int64_t n, int64_t* out) const override {
    dataset_->val().Copy(start, n, out);
  }

 private:
  std::unique_ptr<TokenDataset> dataset_;
};

class SyntheticSource : public TokenSource {
 public:
  SyntheticSource(uint64_t seed, int64_t vocab, int64_t train, int64_t val) : vocab_(vocab) {
    // Four allowed successors per token, drawn from the seed.
    successors_.resize(static_cast<size_t>(vocab * 4));
    for (int64_t t = 0; t < vocab; ++t) {
      for (int64_t j = 0; j < 4; ++j) {
        successors_[t * 4 + j] =
            static_cast<int32_t>(Mix64(seed * 0x100000001b3ULL + t * 4 + j) % vocab);
      }
    }
    train_ = Generate(Mix64(seed ^ 0x7472616eULL), train);
    val_ = Generate(Mix64(seed ^ 0x76616cULL), val);
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t train_size() const override { return static_cast<int64_t>(train_.size()); }
  int64_t val_size() const override { return static_cast<int64_t>(val_.size()); }
  void CopyTrain(int64_t start, int64_t n, int64_t* out) const override {
    std::copy_n(train_.begin() + start, n, out);
  }
  void CopyVal(int64_t start, int64_t n, int64_t* out) const override {
    std::copy_n(val_.begin() + start, n, out);
  }

 private:
  std::vector<int64_t> Generate(uint64_t stream_seed, int64_t n) const {
    std::vector<int64_t> out(static_cast<size_t>(n));
    uint64_t state = stream_seed;
    int64_t prev = 0, cur = 1 % vocab_;
    for (int64_t i = 0; i < n; ++i) {
      state = Mix64(state);
      const double u = static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
      const int64_t j = u < 0.55 ? 0 : u < 0.80 ? 1 : u < 0.92 ? 2 : 3;
      // The previous token decides which successor is the likely one.
      const int64_t next = successors_[cur * 4 + (j + prev) % 4];
      out[i] = next;
      prev = cur;
      cur = next;
    }
    return out;
  }

  int64_t vocab_;
  std::vector<int32_t> successors_;
  std::vector<int64_t> train_, val_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenSource>> OpenDatasetSource(const std::string& dir,
                                                               int64_t model_vocab) {
  ASSIGN_OR_RETURN(std::unique_ptr<TokenDataset> dataset, TokenDataset::Open(dir, model_vocab));
  return std::unique_ptr<TokenSource>(new DatasetSource(std::move(dataset)));
}

std::unique_ptr<TokenSource> MakeSyntheticSource(uint64_t seed, int64_t vocab_size,
                                                 int64_t train_tokens, int64_t val_tokens) {
  return std::make_unique<SyntheticSource>(seed, vocab_size, train_tokens, val_tokens);
}

int64_t TrainWindowStart(uint64_t seed, int64_t step, int64_t row, int64_t train_size,
                         int64_t context) {
  const uint64_t h =
      Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(row));
  return static_cast<int64_t>(h % static_cast<uint64_t>(train_size - context));
}

std::vector<int64_t> ValWindowStarts(int64_t val_size, int64_t context, int64_t count) {
  std::vector<int64_t> starts;
  const int64_t span = val_size - context - 1;  // last usable start
  count = std::max<int64_t>(1, std::min(count, span + 1));
  for (int64_t i = 0; i < count; ++i) starts.push_back(count == 1 ? 0 : i * span / (count - 1));
  return starts;
}

std::vector<int64_t> ValWindowStartsWhole(int64_t val_size, int64_t context) {
  std::vector<int64_t> starts;
  for (int64_t start = 0; start + context + 1 <= val_size; start += context) {
    starts.push_back(start);
  }
  return starts;
}

namespace {

Batch Fill(int64_t rows, int64_t context, const std::function<void(int64_t, int64_t*)>& copy) {
  std::vector<int64_t> window(static_cast<size_t>(context + 1));
  torch::Tensor inputs = torch::empty({rows, context}, torch::kInt64);
  torch::Tensor targets = torch::empty({rows, context}, torch::kInt64);
  int64_t* in = inputs.data_ptr<int64_t>();
  int64_t* tg = targets.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    copy(r, window.data());
    std::copy_n(window.begin(), context, in + r * context);
    std::copy_n(window.begin() + 1, context, tg + r * context);
  }
  return Batch{inputs, targets};
}

}  // namespace

Batch TrainBatch(const TokenSource& source, uint64_t seed, int64_t step, int64_t row_begin,
                 int64_t row_end, int64_t context) {
  return Fill(row_end - row_begin, context, [&](int64_t r, int64_t* out) {
    source.CopyTrain(TrainWindowStart(seed, step, row_begin + r, source.train_size(), context),
                     context + 1, out);
  });
}

Batch ValBatch(const TokenSource& source, const std::vector<int64_t>& starts, int64_t begin,
               int64_t end, int64_t context) {
  return Fill(end - begin, context, [&](int64_t r, int64_t* out) {
    source.CopyVal(starts[begin + r], context + 1, out);
  });
}

}  // namespace xmod
