#include "orchestrator/data/import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace xmod {
namespace {

template <typename T>
T Load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Element types of token files: Megatron's dtype codes, plus uint32 (llm.c, raw).
enum class Elem { kU8, kI8, kI16, kI32, kI64, kU16, kU32 };

int ElemBytes(Elem e) {
  switch (e) {
    case Elem::kU8:
    case Elem::kI8:
      return 1;
    case Elem::kI16:
    case Elem::kU16:
      return 2;
    case Elem::kI32:
    case Elem::kU32:
      return 4;
    case Elem::kI64:
      return 8;
  }
  return 1;
}

// Element i of an array of `e`, widened; may be negative for the signed types.
int64_t ElemAt(const unsigned char* base, Elem e, int64_t i) {
  switch (e) {
    case Elem::kU8:
      return base[i];
    case Elem::kI8:
      return static_cast<int8_t>(base[i]);
    case Elem::kI16:
      return Load<int16_t>(base + 2 * i);
    case Elem::kU16:
      return Load<uint16_t>(base + 2 * i);
    case Elem::kI32:
      return Load<int32_t>(base + 4 * i);
    case Elem::kU32:
      return Load<uint32_t>(base + 4 * i);
    case Elem::kI64:
      return Load<int64_t>(base + 8 * i);
  }
  return 0;
}

// Documents of one input: runs of ids in a mapped file.
struct Source {
  std::string path;
  std::unique_ptr<MappedFile> bin;
  std::unique_ptr<MappedFile> idx;  // Megatron only
  const unsigned char* ids = nullptr;
  Elem elem = Elem::kU16;
  // Document d is the runs [run_begin[d], run_begin[d + 1]) of `runs`, each an
  // (element offset, length) in `ids`.
  std::vector<std::pair<int64_t, int64_t>> runs;
  std::vector<int64_t> run_begin;  // documents + 1 entries
  int64_t documents() const { return static_cast<int64_t>(run_begin.size()) - 1; }
};

// Splits [0, n) at every EOS: each document ends with one, except perhaps the last.
void SplitAtEos(Source* s, int64_t n, int64_t eos) {
  s->run_begin.push_back(0);
  int64_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ElemAt(s->ids, s->elem, i) == eos) {
      s->runs.emplace_back(start, i + 1 - start);
      s->run_begin.push_back(static_cast<int64_t>(s->runs.size()));
      start = i + 1;
    }
  }
  if (start < n) {
    s->runs.emplace_back(start, n - start);
    s->run_begin.push_back(static_cast<int64_t>(s->runs.size()));
  }
}

absl::Status OpenNanoGpt(const ImportOptions& o, Source* s) {
  ASSIGN_OR_RETURN(s->bin, MappedFile::Open(s->path));
  const size_t bytes = s->bin->size();
  int64_t header = 0;
  s->elem = Elem::kU16;
  if (bytes >= static_cast<size_t>(kLlmcHeaderBytes)) {
    const int32_t magic = Load<int32_t>(s->bin->data());
    if (magic == kLlmcMagicUint16 || magic == kLlmcMagicUint32) {
      const int32_t version = Load<int32_t>(s->bin->data() + 4);
      const int64_t count = Load<int32_t>(s->bin->data() + 8);
      const bool wide = magic == kLlmcMagicUint32;
      const int32_t expected_version = wide ? 7 : 1;
      if (version != expected_version) {
        return absl::InvalidArgumentError(absl::StrCat(s->path, ": llm.c header: magic ", magic,
                                                       " with version ", version, ", expected ",
                                                       expected_version));
      }
      s->elem = wide ? Elem::kU32 : Elem::kU16;
      header = kLlmcHeaderBytes;
      const int64_t have = (static_cast<int64_t>(bytes) - header) / ElemBytes(s->elem);
      if ((static_cast<int64_t>(bytes) - header) % ElemBytes(s->elem) != 0 || have != count) {
        return absl::InvalidArgumentError(absl::StrCat(s->path, ": llm.c header says ", count,
                                                       " tokens but the file holds ",
                                                       bytes - header, " bytes after the header"));
      }
    }
  }
  if (header == 0 && bytes % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(s->path, ": ", bytes,
                     " bytes is not a whole number of uint16 ids and there is no llm.c "
                     "header (magic ",
                     kLlmcMagicUint16, " or ", kLlmcMagicUint32, ")"));
  }
  s->ids = s->bin->data() + header;
  SplitAtEos(s, (static_cast<int64_t>(bytes) - header) / ElemBytes(s->elem), o.eos);
  return absl::OkStatus();
}

absl::Status OpenRaw(const ImportOptions& o, Source* s) {
  if (o.dtype != "uint16" && o.dtype != "uint32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: give uint16 or uint32 for raw files, got '", o.dtype, "'"));
  }
  s->elem = o.dtype == "uint16" ? Elem::kU16 : Elem::kU32;
  ASSIGN_OR_RETURN(s->bin, MappedFile::Open(s->path));
  const int width = ElemBytes(s->elem);
  if (s->bin->size() % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        s->path, ": ", s->bin->size(), " bytes is not a whole number of ", o.dtype, " ids"));
  }
  s->ids = s->bin->data();
  SplitAtEos(s, static_cast<int64_t>(s->bin->size()) / width, o.eos);
  return absl::OkStatus();
}

// Megatron-LM's MMIDIDX index, version 1: the header "MMIDIDX\0\0", u64 version,
// u8 dtype code, u64 sequence count S, u64 document count D + 1; then int32
// sequence lengths [S], int64 byte offsets into .bin [S], int64 document starts
// as sequence indices [D + 1] (0 first, S last).
absl::Status OpenMegatron(Source* s) {
  std::string prefix = s->path;
  for (const char* ext : {".bin", ".idx"}) {
    if (absl::EndsWith(prefix, ext)) prefix.resize(prefix.size() - 4);
  }
  const std::string idx_path = prefix + ".idx";
  s->path = prefix + ".bin";
  ASSIGN_OR_RETURN(s->idx, MappedFile::Open(idx_path));
  ASSIGN_OR_RETURN(s->bin, MappedFile::Open(s->path));
  const unsigned char* p = s->idx->data();
  const size_t size = s->idx->size();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": ", what));
  };
  constexpr size_t kHead = 9 + 8 + 1 + 8 + 8;
  if (size < kHead || std::memcmp(p, "MMIDIDX\0\0", 9) != 0) {
    return bad("not a Megatron index (no MMIDIDX header)");
  }
  const uint64_t version = Load<uint64_t>(p + 9);
  if (version != 1) return bad(absl::StrCat("index version ", version, ", expected 1"));
  const int code = p[17];
  const Elem codes[] = {Elem::kU8, Elem::kI8, Elem::kI16, Elem::kI32, Elem::kI64};
  if (code >= 1 && code <= 5) {
    s->elem = codes[code - 1];
  } else if (code == 8) {
    s->elem = Elem::kU16;
  } else {
    return bad(absl::StrCat("dtype code ", code, " is not an integer type (1-5 or 8)"));
  }
  const uint64_t n_seq = Load<uint64_t>(p + 18);
  const uint64_t n_doc_idx = Load<uint64_t>(p + 26);
  const uint64_t need = kHead + n_seq * 4 + n_seq * 8 + n_doc_idx * 8;
  if (n_seq > size || n_doc_idx > size || need > size) {
    return bad(absl::StrCat("holds ", size, " bytes, too few for ", n_seq, " sequences and ",
                            n_doc_idx, " document indices"));
  }
  const unsigned char* lengths = p + kHead;
  const unsigned char* pointers = lengths + n_seq * 4;
  const unsigned char* doc_idx = pointers + n_seq * 8;
  const int width = ElemBytes(s->elem);
  s->ids = s->bin->data();
  for (uint64_t i = 0; i < n_seq; ++i) {
    const int64_t len = Load<int32_t>(lengths + 4 * i);
    const int64_t ptr = Load<int64_t>(pointers + 8 * i);
    if (len < 0 || ptr < 0 || ptr % width != 0 ||
        static_cast<uint64_t>(ptr) + static_cast<uint64_t>(len) * width > s->bin->size()) {
      return bad(absl::StrCat("sequence ", i, " (", len, " ids at byte ", ptr, ") is outside ",
                              s->path, " (", s->bin->size(), " bytes)"));
    }
    s->runs.emplace_back(ptr / width, len);
  }
  if (n_doc_idx < 1 || Load<int64_t>(doc_idx) != 0 ||
      Load<int64_t>(doc_idx + 8 * (n_doc_idx - 1)) != static_cast<int64_t>(n_seq)) {
    return bad("the document index must start at 0 and end at the sequence count");
  }
  for (uint64_t d = 0; d < n_doc_idx; ++d) {
    const int64_t start = Load<int64_t>(doc_idx + 8 * d);
    if (d > 0 && start < s->run_begin.back()) {
      return bad(absl::StrCat("document ", d, " starts before document ", d - 1));
    }
    s->run_begin.push_back(start);
  }
  return absl::OkStatus();
}

// Appends document d of s (with EOS when it lacks one) to `out`; an id that is
// negative or outside the vocabulary is refused with its place in the file.
absl::Status ReadDocument(const Source& s, int64_t d, const ImportOptions& o,
                          std::vector<uint32_t>* out) {
  out->clear();
  for (int64_t r = s.run_begin[d]; r < s.run_begin[d + 1]; ++r) {
    const auto [offset, length] = s.runs[static_cast<size_t>(r)];
    for (int64_t i = offset; i < offset + length; ++i) {
      const int64_t id = ElemAt(s.ids, s.elem, i);
      if (id < 0 || id >= o.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(s.path, ": id ", id, " at element ", i,
                                                       " (document ", d,
                                                       ") is outside --vocab-size ", o.vocab_size));
      }
      out->push_back(static_cast<uint32_t>(id));
    }
  }
  if (out->empty() || out->back() != static_cast<uint32_t>(o.eos)) {
    out->push_back(static_cast<uint32_t>(o.eos));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Source>> OpenAll(const ImportOptions& o,
                                            const std::vector<std::string>& paths) {
  std::vector<Source> sources(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    sources[i].path = paths[i];
    if (o.format == "nanogpt") {
      RETURN_IF_ERROR(OpenNanoGpt(o, &sources[i]));
    } else if (o.format == "raw") {
      RETURN_IF_ERROR(OpenRaw(o, &sources[i]));
    } else {
      RETURN_IF_ERROR(OpenMegatron(&sources[i]));
    }
  }
  return sources;
}

}  // namespace

absl::StatusOr<TokenMeta> ImportTokens(const ImportOptions& o) {
  if (o.format != "nanogpt" && o.format != "megatron" && o.format != "raw") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: unknown format '", o.format, "' (known: nanogpt, megatron, raw)"));
  }
  if (o.inputs.empty()) return absl::InvalidArgumentError("--input: give at least one file");
  if (o.vocab_size < 2 || o.vocab_size > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        "--vocab-size: give the tokenizer's vocabulary size (50257 for GPT-2), at least 2");
  }
  if (o.eos < 0 || o.eos >= o.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--eos: give the id that ends each document, below --vocab-size (50256 for GPT-2); got ",
        o.eos));
  }
  if (o.format != "raw" && !o.dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: only raw files take it; ", o.format,
                                                   " files state their own width"));
  }
  ASSIGN_OR_RETURN(const int64_t period, ValPeriod(o.val_fraction));
  const int64_t offset = period / 2;
  ASSIGN_OR_RETURN(const std::vector<Source> train_sources, OpenAll(o, o.inputs));
  ASSIGN_OR_RETURN(const std::vector<Source> val_sources, OpenAll(o, o.val_inputs));
  int64_t n_docs = 0;
  for (const Source& s : train_sources) n_docs += s.documents();

  TokenMeta meta;
  meta.tokenizer = o.tokenizer;
  meta.eos_token = o.eos;
  nlohmann::json fields = {{"imported_from", o.format}};
  ASSIGN_OR_RETURN(auto writer, TokenWriter::Create(o.output_dir, o.vocab_size));
  std::vector<uint32_t> doc;
  if (!o.val_inputs.empty()) {
    std::vector<std::string> names;
    for (const auto* sources : {&train_sources, &val_sources}) {
      for (const Source& s : *sources) {
        for (int64_t d = 0; d < s.documents(); ++d) {
          RETURN_IF_ERROR(ReadDocument(s, d, o, &doc));
          RETURN_IF_ERROR(writer->Append(sources == &val_sources, doc.data(), doc.size()));
        }
        if (sources == &val_sources) {
          names.push_back(std::filesystem::path(s.path).filename().string());
        }
      }
    }
    meta.val_split = absl::StrCat("the documents of ", absl::StrJoin(names, ", "), " as given");
    fields["val_unit"] = "file";
  } else if (n_docs >= period) {
    int64_t i = 0, held = 0;
    for (const Source& s : train_sources) {
      for (int64_t d = 0; d < s.documents(); ++d, ++i) {
        const bool held_out = i % period == offset;
        RETURN_IF_ERROR(ReadDocument(s, d, o, &doc));
        RETURN_IF_ERROR(writer->Append(held_out, doc.data(), doc.size()));
        held += held_out ? 1 : 0;
      }
    }
    meta.val_split = absl::StrCat("every ", Ordinal(period), " document, offset ", offset, ": ",
                                  held, " of ", n_docs, " documents held out");
    fields.update({{"val_unit", "document"}, {"val_period", period}, {"val_offset", offset}});
  } else {
    // Fewer documents than the period: chunks of the concatenated ids. Their size
    // needs the total, counted first (one EOS more for a document without one).
    int64_t total = 0;
    for (const Source& s : train_sources) {
      for (int64_t d = 0; d < s.documents(); ++d) {
        int64_t last = -1;
        for (int64_t r = s.run_begin[d]; r < s.run_begin[d + 1]; ++r) {
          const auto [off, len] = s.runs[static_cast<size_t>(r)];
          total += len;
          if (len > 0) last = ElemAt(s.ids, s.elem, off + len - 1);
        }
        total += last == o.eos ? 0 : 1;
      }
    }
    const int64_t chunk = std::max<int64_t>(1, std::min(kValChunkBytes, total / period));
    int64_t position = 0;
    for (const Source& s : train_sources) {
      for (int64_t d = 0; d < s.documents(); ++d) {
        RETURN_IF_ERROR(ReadDocument(s, d, o, &doc));
        // Cut the document where chunk boundaries fall.
        size_t at = 0;
        while (at < doc.size()) {
          const int64_t j = position / chunk;
          const size_t n =
              std::min<size_t>(doc.size() - at, static_cast<size_t>((j + 1) * chunk - position));
          RETURN_IF_ERROR(writer->Append(j % period == offset, doc.data() + at, n));
          at += n;
          position += static_cast<int64_t>(n);
        }
      }
    }
    const int64_t n_chunks = (total + chunk - 1) / chunk;
    const int64_t held = n_chunks > offset ? (n_chunks - offset + period - 1) / period : 0;
    meta.val_split = absl::StrCat(
        "every ", Ordinal(period), " chunk of ", chunk, " tokens, offset ", offset, ": ", held,
        " of ", n_chunks, " chunks held out (", n_docs, " documents, fewer than ", period, ")");
    fields.update({{"val_unit", "chunk"},
                   {"val_period", period},
                   {"val_offset", offset},
                   {"val_chunk_tokens", chunk},
                   {"val_chunks_held_out", held},
                   {"val_chunks", n_chunks}});
  }
  int64_t val_docs = 0;
  for (const Source& s : val_sources) val_docs += s.documents();
  fields["documents"] = n_docs + val_docs;
  return writer->Commit(std::move(meta), fields);
}

}  // namespace xmod
