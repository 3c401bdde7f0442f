#include "common/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/status_macros.h"

namespace xmod {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    file->data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::string Ordinal(int64_t n) {
  const int64_t last = n % 10, tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : last == 1                ? "st"
                       : last == 2                ? "nd"
                       : last == 3                ? "rd"
                                                  : "th";
  return absl::StrCat(n, suffix);
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path, int width) {
  std::unique_ptr<TokenFile> file(new TokenFile());
  ASSIGN_OR_RETURN(file->file_, MappedFile::Open(path));
  const size_t bytes = file->file_->size();
  if (bytes % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": size ", bytes, " bytes is not a whole number of ", width, "-byte tokens"));
  }
  file->width_ = width;
  file->data_ = file->file_->data();
  file->size_ = static_cast<int64_t>(bytes / width);
  return file;
}

void TokenFile::Copy(int64_t start, int64_t n, int64_t* out) const {
  for (int64_t i = 0; i < n; ++i) out[i] = (*this)[start + i];
}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const std::string& dir,
                                                                 int64_t expected_vocab) {
  const std::string meta_path = dir + "/meta.json";
  std::ifstream in(meta_path);
  if (!in) return absl::NotFoundError(absl::StrCat(meta_path, ": no such file"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": not valid JSON: ", e.what()));
  }
  auto dataset = std::unique_ptr<TokenDataset>(new TokenDataset());
  TokenMeta& m = dataset->meta_;
  try {
    m.format = j.at("format").get<std::string>();
    m.version = j.at("version").get<int>();
    m.dtype = j.at("dtype").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<int64_t>();
    m.tokenizer = j.value("tokenizer", std::string("unknown"));
    m.train_tokens = j.at("train_tokens").get<int64_t>();
    m.val_tokens = j.at("val_tokens").get<int64_t>();
    m.val_split = j.value("val_split", std::string());
    m.val_documents = j.value("val_documents", std::vector<std::string>());
    m.fingerprint = j.value("fingerprint", std::string());
    m.max_token = j.value("max_token", int64_t{-1});
    m.eos_token = j.value("eos_token", int64_t{-1});
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": ", e.what()));
  }
  if (m.format != kTokenFormat || m.version != kTokenFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": format '", m.format, "' version ",
                                                   m.version, ", expected '", kTokenFormat,
                                                   "' version ", kTokenFormatVersion));
  }
  int width = 0;
  if (m.dtype == "uint16") {
    width = 2;
  } else if (m.dtype == "uint32") {
    width = 4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": dtype: unknown dtype '", m.dtype, "' (known: uint16, uint32)"));
  }
  if (width == 2 && m.vocab_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": vocab_size: ", m.vocab_size, " does not fit uint16 tokens"));
  }
  if (expected_vocab > 0 && m.vocab_size > expected_vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(meta_path, ": vocab_size: the data has ", m.vocab_size,
                     " token ids but the model's vocabulary is only ", expected_vocab));
  }
  if (m.max_token >= m.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(meta_path, ": max_token: ", m.max_token,
                                                   " is outside vocab_size ", m.vocab_size));
  }
  ASSIGN_OR_RETURN(dataset->train_, TokenFile::Open(dir + "/train.bin", width));
  ASSIGN_OR_RETURN(dataset->val_, TokenFile::Open(dir + "/val.bin", width));
  for (auto [name, file, count] : {std::tuple{"train.bin", dataset->train_.get(), m.train_tokens},
                                   std::tuple{"val.bin", dataset->val_.get(), m.val_tokens}}) {
    if (file->size() != count) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/", name, ": holds ", file->size(),
                                                     " tokens but meta.json says ", count));
    }
    if (m.max_token >= 0) continue;  // checked below, from meta.json
    for (int64_t i = 0; i < file->size(); ++i) {
      if ((*file)[i] >= static_cast<uint64_t>(m.vocab_size)) {
        return absl::InvalidArgumentError(absl::StrCat(dir, "/", name, ": token ", (*file)[i],
                                                       " at position ", i,
                                                       " is outside vocab_size ", m.vocab_size));
      }
    }
  }
  return dataset;
}

std::string StripBrownTags(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string token;
    bool first = true;
    while (words >> token) {
      const size_t slash = token.rfind('/');
      std::string word = slash == std::string::npos || slash == 0 ? token : token.substr(0, slash);
      if (word == "``" || word == "''") word = "\"";
      if (!first) out += ' ';
      out += word;
      first = false;
    }
    if (!first) out += '\n';
  }
  return out;
}

struct TokenWriter::Side {
  std::string tmp_path;
  std::ofstream out;
  StreamChecksum sum;
  std::vector<char> buffer;
};

absl::StatusOr<std::unique_ptr<TokenWriter>> TokenWriter::Create(const std::string& dir,
                                                                 int64_t vocab_size) {
  if (vocab_size < 2 || vocab_size > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size: ", vocab_size, " is outside [2, 2^32]"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  std::unique_ptr<TokenWriter> w(new TokenWriter());
  w->dir_ = dir;
  w->vocab_size_ = vocab_size;
  w->width_ = TokenWidth(vocab_size);
  for (int v = 0; v < 2; ++v) {
    w->side_[v] = std::make_unique<Side>();
    Side& side = *w->side_[v];
    side.tmp_path = absl::StrCat(dir, v ? "/val.bin.tmp" : "/train.bin.tmp");
    side.out.open(side.tmp_path, std::ios::binary | std::ios::trunc);
    if (!side.out) {
      return absl::InternalError(absl::StrCat(side.tmp_path, ": cannot write"));
    }
  }
  return w;
}

TokenWriter::~TokenWriter() {
  if (committed_) return;
  std::error_code ec;
  for (auto& side : side_) {
    if (side == nullptr) continue;
    side->out.close();
    std::filesystem::remove(side->tmp_path, ec);
  }
  std::filesystem::remove(dir_ + "/meta.json.tmp", ec);
}

absl::Status TokenWriter::Append(bool val, const uint32_t* tokens, size_t n) {
  Side& side = *side_[val ? 1 : 0];
  const int64_t base = count_[val ? 1 : 0];
  side.buffer.resize(n * static_cast<size_t>(width_));
  uint32_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = tokens[i];
    if (t >= static_cast<uint64_t>(vocab_size_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", t, " at position ", base + static_cast<int64_t>(i), " of the ",
          val ? "validation" : "training", " split is outside vocab_size ", vocab_size_));
    }
    largest = std::max(largest, t);
    if (width_ == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(side.buffer.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(side.buffer.data() + 4 * i, &t, 4);
    }
  }
  side.out.write(side.buffer.data(), static_cast<std::streamsize>(side.buffer.size()));
  if (!side.out) return absl::InternalError(absl::StrCat(side.tmp_path, ": write failed"));
  side.sum.Update(side.buffer.data(), side.buffer.size());
  count_[val ? 1 : 0] += static_cast<int64_t>(n);
  max_token_ = std::max<int64_t>(max_token_, largest);
  return absl::OkStatus();
}

absl::StatusOr<TokenMeta> TokenWriter::Commit(TokenMeta meta, const nlohmann::json& extra) {
  if (count_[0] < 2 || count_[1] < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the split leaves ", count_[0], " training and ", count_[1],
                     " validation tokens; each side needs at least 2 (", meta.val_split, ")"));
  }
  for (auto& side : side_) {
    side->out.close();
    if (!side->out) return absl::InternalError(absl::StrCat(side->tmp_path, ": write failed"));
  }
  meta.format = kTokenFormat;
  meta.version = kTokenFormatVersion;
  meta.dtype = width_ == 2 ? "uint16" : "uint32";
  meta.vocab_size = vocab_size_;
  meta.train_tokens = count_[0];
  meta.val_tokens = count_[1];
  meta.fingerprint = absl::StrCat("xxh3:", side_[0]->sum.Hex(), side_[1]->sum.Hex());
  meta.max_token = max_token_;
  nlohmann::json j = {{"format", meta.format},        {"version", meta.version},
                      {"dtype", meta.dtype},          {"vocab_size", meta.vocab_size},
                      {"tokenizer", meta.tokenizer},  {"train_tokens", meta.train_tokens},
                      {"val_tokens", meta.val_tokens}};
  if (!meta.val_split.empty()) j["val_split"] = meta.val_split;
  j.update(extra);
  j["fingerprint"] = meta.fingerprint;
  j["max_token"] = meta.max_token;
  if (meta.eos_token >= 0) j["eos_token"] = meta.eos_token;
  const std::string dir = dir_ + "/";
  {
    std::ofstream out(dir + "meta.json.tmp", std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(dir, "meta.json.tmp: write failed"));
  }
  // meta.json last: a dataset is complete exactly when its meta.json exists.
  std::error_code ec;
  std::filesystem::remove(dir + "meta.json", ec);
  for (const char* name : {"train.bin", "val.bin", "meta.json"}) {
    std::filesystem::rename(dir + name + ".tmp", dir + name, ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, name, ": ", ec.message()));
  }
  committed_ = true;
  return meta;
}

TextTokenizer ByteTokenizer(bool eos) {
  TextTokenizer t;
  t.name = "bytes";
  t.bytes = true;
  t.vocab_size = eos ? 257 : 256;
  t.eos = eos ? 256 : -1;
  t.encode = [](std::string_view text) -> absl::StatusOr<std::vector<uint32_t>> {
    std::vector<uint32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  };
  return t;
}

absl::StatusOr<int64_t> ValPeriod(double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction: must be in (0, 1), got ", val_fraction));
  }
  return std::max<int64_t>(2, std::llround(1.0 / val_fraction));
}

absl::StatusOr<std::vector<std::string>> ReadDocuments(const PrepareOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("--input: give at least one file");
  std::vector<std::string> documents;
  for (const std::string& path : options.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
    std::stringstream buffer;
    buffer << in.rdbuf();
    documents.push_back(options.strip_tags ? StripBrownTags(buffer.str()) : buffer.str());
  }
  return documents;
}

absl::StatusOr<TokenMeta> PrepareByteDataset(const PrepareOptions& options) {
  return PrepareTokenDataset(options, ByteTokenizer(options.eos), nlohmann::json::object());
}

absl::StatusOr<TokenMeta> PrepareTokenDataset(const PrepareOptions& options,
                                              const TextTokenizer& tokenizer,
                                              const nlohmann::json& extra,
                                              const std::vector<std::string>* documents) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("--input: give at least one file");
  ASSIGN_OR_RETURN(const int64_t period, ValPeriod(options.val_fraction));
  std::vector<std::string> read;
  if (documents == nullptr) {
    ASSIGN_OR_RETURN(read, ReadDocuments(options));
    documents = &read;
  }
  const int64_t offset = period / 2;
  const int64_t n_docs = static_cast<int64_t>(documents->size());
  TokenMeta meta;
  meta.tokenizer = tokenizer.name;
  meta.eos_token = tokenizer.eos;
  auto encode = [&](int64_t i) -> absl::StatusOr<std::vector<uint32_t>> {
    auto ids = tokenizer.encode((*documents)[static_cast<size_t>(i)]);
    if (!ids.ok()) {
      return absl::Status(ids.status().code(), absl::StrCat(options.inputs[static_cast<size_t>(i)],
                                                            ": ", ids.status().message()));
    }
    if (tokenizer.eos >= 0) ids->push_back(static_cast<uint32_t>(tokenizer.eos));
    return ids;
  };
  ASSIGN_OR_RETURN(auto writer, TokenWriter::Create(options.output_dir, tokenizer.vocab_size));
  nlohmann::json fields = {{"val_period", period}, {"val_offset", offset}};
  if (n_docs >= period) {
    for (int64_t i = 0; i < n_docs; ++i) {
      const bool held_out = i % period == offset;
      ASSIGN_OR_RETURN(const std::vector<uint32_t> ids, encode(i));
      RETURN_IF_ERROR(writer->Append(held_out, ids.data(), ids.size()));
      if (held_out) {
        // The file name, not the path: a dataset does not record where it was built.
        meta.val_documents.push_back(
            std::filesystem::path(options.inputs[static_cast<size_t>(i)]).filename().string());
      }
    }
    meta.val_split = absl::StrCat("every ", Ordinal(period), " document, offset ", offset, ": ",
                                  meta.val_documents.size(), " of ", n_docs, " documents held out");
    fields["val_unit"] = "document";
  } else {
    // Too few documents to hold out whole ones at this fraction: interleaved chunks
    // of the concatenated ids, at least `period` of them.
    std::vector<uint32_t> all;
    for (int64_t i = 0; i < n_docs; ++i) {
      ASSIGN_OR_RETURN(const std::vector<uint32_t> ids, encode(i));
      all.insert(all.end(), ids.begin(), ids.end());
    }
    const int64_t total = static_cast<int64_t>(all.size());
    const int64_t chunk = std::max<int64_t>(1, std::min(kValChunkBytes, total / period));
    const int64_t n_chunks = (total + chunk - 1) / chunk;
    int64_t held = 0;
    for (int64_t j = 0; j < n_chunks; ++j) {
      const bool held_out = j % period == offset;
      const int64_t begin = j * chunk, n = std::min(chunk, total - begin);
      RETURN_IF_ERROR(writer->Append(held_out, all.data() + begin, static_cast<size_t>(n)));
      held += held_out ? 1 : 0;
    }
    const char* unit = tokenizer.bytes && tokenizer.eos < 0 ? "bytes" : "tokens";
    meta.val_split =
        absl::StrCat("every ", Ordinal(period), " chunk of ", chunk, " ", unit, ", offset ", offset,
                     ": ", held, " of ", n_chunks, " chunks held out (", n_docs,
                     n_docs == 1 ? " input file" : " input files", ", fewer than ", period, ")");
    fields["val_unit"] = "chunk";
    fields[unit == std::string_view("bytes") ? "val_chunk_bytes" : "val_chunk_tokens"] = chunk;
    fields["val_chunks_held_out"] = held;
    fields["val_chunks"] = n_chunks;
  }
  fields["val_documents"] = meta.val_documents;
  fields.update(extra);
  return writer->Commit(std::move(meta), fields);
}

double UnigramEntropy(const TokenFile& tokens, int64_t vocab_size) {
  std::vector<double> counts(static_cast<size_t>(vocab_size), 0.0);
  for (int64_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < counts.size()) counts[tokens[i]] += 1.0;
  }
  double h = 0.0;
  const double n = static_cast<double>(tokens.size());
  for (double c : counts) {
    if (c > 0) h -= (c / n) * std::log(c / n);
  }
  return h;
}

}  // namespace xmod
