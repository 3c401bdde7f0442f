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

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path, int width) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  std::unique_ptr<TokenFile> file(new TokenFile());
  file->width_ = width;
  file->bytes_ = static_cast<size_t>(st.st_size);
  if (file->bytes_ % width != 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": size ", file->bytes_, " bytes is not a whole number of ", width, "-byte tokens"));
  }
  file->size_ = static_cast<int64_t>(file->bytes_ / width);
  if (file->bytes_ > 0) {
    void* p = ::mmap(nullptr, file->bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    file->data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  return file;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
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

namespace {

absl::Status WriteTokens(const std::string& path, const std::string& bytes) {
  std::vector<uint16_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// "1st", "2nd", "3rd", "4th", "11th", "20th", "21st".
std::string Ordinal(int64_t n) {
  const int64_t last = n % 10, tens = n % 100;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : last == 1                ? "st"
                       : last == 2                ? "nd"
                       : last == 3                ? "rd"
                                                  : "th";
  return absl::StrCat(n, suffix);
}

}  // namespace

absl::StatusOr<TokenMeta> PrepareByteDataset(const PrepareOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("--input: give at least one file");
  if (!(options.val_fraction > 0.0 && options.val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--val-fraction: must be in (0, 1), got ", options.val_fraction));
  }
  std::vector<std::string> documents;
  int64_t total = 0;
  for (const std::string& path : options.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
    std::stringstream buffer;
    buffer << in.rdbuf();
    documents.push_back(options.strip_tags ? StripBrownTags(buffer.str()) : buffer.str());
    total += static_cast<int64_t>(documents.back().size());
  }

  const int64_t period = std::max<int64_t>(2, std::llround(1.0 / options.val_fraction));
  const int64_t offset = period / 2;
  const int64_t n_docs = static_cast<int64_t>(documents.size());
  TokenMeta meta;
  meta.tokenizer = "bytes";
  std::string train, val;
  train.reserve(static_cast<size_t>(total));
  nlohmann::json split;  // the rule, as fields, for meta.json
  if (n_docs >= period) {
    for (int64_t i = 0; i < n_docs; ++i) {
      const bool held_out = i % period == offset;
      (held_out ? val : train) += documents[static_cast<size_t>(i)];
      if (held_out) {
        // The file name, not the path: a dataset does not record where it was built.
        meta.val_documents.push_back(
            std::filesystem::path(options.inputs[static_cast<size_t>(i)]).filename().string());
      }
    }
    meta.val_split = absl::StrCat("every ", Ordinal(period), " document, offset ", offset, ": ",
                                  meta.val_documents.size(), " of ", n_docs, " documents held out");
    split = {{"val_unit", "document"}};
  } else {
    // Too few documents to hold out whole ones at this fraction: interleaved chunks
    // of the concatenated text, at least `period` of them.
    const int64_t chunk = std::max<int64_t>(1, std::min(kValChunkBytes, total / period));
    std::string text;
    text.reserve(static_cast<size_t>(total));
    for (const std::string& d : documents) text += d;
    const int64_t n_chunks = (total + chunk - 1) / chunk;
    int64_t held = 0;
    for (int64_t j = 0; j < n_chunks; ++j) {
      const bool held_out = j % period == offset;
      (held_out ? val : train) +=
          text.substr(static_cast<size_t>(j * chunk), static_cast<size_t>(chunk));
      held += held_out ? 1 : 0;
    }
    meta.val_split =
        absl::StrCat("every ", Ordinal(period), " chunk of ", chunk, " bytes, offset ", offset,
                     ": ", held, " of ", n_chunks, " chunks held out (", n_docs,
                     n_docs == 1 ? " input file" : " input files", ", fewer than ", period, ")");
    split = {{"val_unit", "chunk"},
             {"val_chunk_bytes", chunk},
             {"val_chunks_held_out", held},
             {"val_chunks", n_chunks}};
  }
  if (val.size() < 2 || train.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the inputs hold only ", total, " bytes; too few to split (", meta.val_split, ")"));
  }
  meta.train_tokens = static_cast<int64_t>(train.size());
  meta.val_tokens = static_cast<int64_t>(val.size());

  std::error_code ec;
  std::filesystem::create_directories(options.output_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(options.output_dir, ": ", ec.message()));
  const std::string dir = options.output_dir + "/";
  RETURN_IF_ERROR(WriteTokens(dir + "train.bin.tmp", train));
  RETURN_IF_ERROR(WriteTokens(dir + "val.bin.tmp", val));
  ASSIGN_OR_RETURN(const std::string train_sum, FileChecksum(dir + "train.bin.tmp"));
  ASSIGN_OR_RETURN(const std::string val_sum, FileChecksum(dir + "val.bin.tmp"));
  meta.fingerprint = absl::StrCat("xxh3:", train_sum, val_sum);
  meta.max_token = 0;
  for (const std::string* part : {&train, &val}) {
    for (const char c : *part) {
      meta.max_token = std::max<int64_t>(meta.max_token, static_cast<unsigned char>(c));
    }
  }
  nlohmann::json j = {{"format", meta.format},
                      {"version", meta.version},
                      {"dtype", meta.dtype},
                      {"vocab_size", meta.vocab_size},
                      {"tokenizer", meta.tokenizer},
                      {"train_tokens", meta.train_tokens},
                      {"val_tokens", meta.val_tokens},
                      {"val_split", meta.val_split},
                      {"val_period", period},
                      {"val_offset", offset},
                      {"val_documents", meta.val_documents},
                      {"fingerprint", meta.fingerprint},
                      {"max_token", meta.max_token}};
  j.update(split);
  {
    std::ofstream out(dir + "meta.json.tmp", std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(dir, "meta.json.tmp: write failed"));
  }
  // meta.json last: a dataset is complete exactly when its meta.json exists.
  std::filesystem::remove(dir + "meta.json", ec);
  for (const char* name : {"train.bin", "val.bin", "meta.json"}) {
    std::filesystem::rename(dir + name + ".tmp", dir + name, ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, name, ": ", ec.message()));
  }
  return meta;
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
