// Where the training and validation tokens of a job come from, and which windows
// make up each batch. A batch row is a pure function of (seed, step, row), so the
// rows one rank reads for a step are exactly the rows several ranks read together,
// and a resumed run needs nothing but its step to continue the same data order.
#ifndef XMOD_WORKER_DATA_BATCHES_H_
#define XMOD_WORKER_DATA_BATCHES_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/token_data.h"

namespace xmod {

// A token stream split into train and validation parts. Thread-safe for reads.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t train_size() const = 0;
  virtual int64_t val_size() const = 0;
  // Copies n tokens from `start` of the train (or validation) stream into out.
  virtual void CopyTrain(int64_t start, int64_t n, int64_t* out) const = 0;
  virtual void CopyVal(int64_t start, int64_t n, int64_t* out) const = 0;
};

// A prepared dataset folder (common/token_data.h).
absl::StatusOr<std::unique_ptr<TokenSource>> OpenDatasetSource(const std::string& dir,
                                                               int64_t model_vocab);

// The built-in synthetic source: a seeded second-order Markov chain. Each token
// allows four successors; the token before it decides which of them gets
// probability 0.55 (then 0.25, 0.12, 0.08). A bigram model learns ≈ log 4 = 1.39
// nats quickly; using two tokens of context reaches ≈ 1.13; a model that uses no
// context stays near log(vocab). Deterministic in (seed, vocab, sizes).
std::unique_ptr<TokenSource> MakeSyntheticSource(uint64_t seed, int64_t vocab_size,
                                                 int64_t train_tokens = 1 << 20,
                                                 int64_t val_tokens = 1 << 16);

// splitmix64 finaliser: a well-mixed 64-bit hash of x.
uint64_t Mix64(uint64_t x);

// First token of training window (seed, step, row): uniform over the starts that
// leave context + 1 tokens. Precondition: train_size > context.
int64_t TrainWindowStart(uint64_t seed, int64_t step, int64_t row, int64_t train_size,
                         int64_t context);

// `count` validation window starts, evenly spread over the stream: the same for every
// job with this context, so validation losses compare across a sweep.
std::vector<int64_t> ValWindowStarts(int64_t val_size, int64_t context, int64_t count);

// Every validation window: starts 0, T, 2T, ... while start + T + 1 <= val_size, so
// each token of the split after the first is predicted exactly once. The same for
// every job with this context.
std::vector<int64_t> ValWindowStartsWhole(int64_t val_size, int64_t context);

struct Batch {
  torch::Tensor inputs;   // [rows, T] int64
  torch::Tensor targets;  // [rows, T] int64, inputs shifted by one token
};

// Rows [row_begin, row_end) of training step `step`.
Batch TrainBatch(const TokenSource& source, uint64_t seed, int64_t step, int64_t row_begin,
                 int64_t row_end, int64_t context);

// Validation windows starts[begin, end).
Batch ValBatch(const TokenSource& source, const std::vector<int64_t>& starts, int64_t begin,
               int64_t end, int64_t context);

}  // namespace xmod

#endif  // XMOD_WORKER_DATA_BATCHES_H_
