// `xmod data import` (docs/data.md): token files made by other tools, turned
// into an xmod dataset folder with a validation split by document.
//   nanogpt   nanoGPT's .bin (uint16, no header) or llm.c's (a 256 x int32 header:
//             magic 20240520 with uint16 ids, or 20240801 with uint32 ids), told
//             apart by the magic number; documents are found at EOS ids.
//   megatron  Megatron-LM's indexed dataset, PREFIX.bin + PREFIX.idx (MMIDIDX
//             version 1): documents from the index.
//   raw       headerless uint16 or uint32 ids (--dtype); documents at EOS ids.
#ifndef XMOD_ORCHESTRATOR_DATA_IMPORT_H_
#define XMOD_ORCHESTRATOR_DATA_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/token_data.h"

namespace xmod {

// llm.c's header: 256 little-endian int32, [0] magic, [1] version, [2] token count.
inline constexpr int32_t kLlmcMagicUint16 = 20240520;  // version 1: uint16 ids
inline constexpr int32_t kLlmcMagicUint32 = 20240801;  // version 7: uint32 ids
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

struct ImportOptions {
  std::string format;               // "nanogpt", "megatron" or "raw"
  std::vector<std::string> inputs;  // files (megatron: PREFIX, PREFIX.bin or PREFIX.idx)
  // Files whose documents are the validation split as they are (nanoGPT's val.bin,
  // say); empty: every n-th document of the inputs is held out (docs/data.md).
  std::vector<std::string> val_inputs;
  std::string output_dir;
  std::string dtype;                  // raw only: "uint16" or "uint32"
  int64_t vocab_size = 0;             // required: every id must be below it
  int64_t eos = -1;                   // required: the id that ends every document
  std::string tokenizer = "unknown";  // recorded in meta.json (e.g. "gpt2")
  double val_fraction = 0.05;
};

// Every document ends with `eos` in the result: documents found at EOS ids
// already do (a trailing part without one gets one); a Megatron document that
// does not end with it gets it appended. Documents keep their order; the split
// is the rule of PrepareByteDataset on documents (every n-th held out, or
// chunks of ids when there are fewer than n documents).
// INVALID_ARGUMENT names the file and what is wrong (a bad header or index, an
// id outside the vocabulary with its position, a missing option); nothing is
// written then.
absl::StatusOr<TokenMeta> ImportTokens(const ImportOptions& options);

}  // namespace xmod

#endif  // XMOD_ORCHESTRATOR_DATA_IMPORT_H_
