#include "common/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/id.h"

namespace xmod {

struct StreamChecksum::State {
  XXH3_state_t* xxh = nullptr;
};

StreamChecksum::StreamChecksum() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  XXH3_64bits_reset(state_->xxh);
}

StreamChecksum::~StreamChecksum() { XXH3_freeState(state_->xxh); }

void StreamChecksum::Update(const void* data, size_t size) {
  XXH3_64bits_update(state_->xxh, data, size);
}

uint64_t StreamChecksum::Digest() const { return XXH3_64bits_digest(state_->xxh); }

namespace {

// 16 lower-case hex digits.
std::string Hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Calls `eat` on each block of the file, in order.
template <typename Eat>
absl::Status ReadBlocks(const std::string& path, Eat eat) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::vector<char> block(size_t{1} << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) eat(block.data(), static_cast<size_t>(got));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return absl::OkStatus();
}

}  // namespace

std::string StreamChecksum::Hex() const { return Hex64(Digest()); }

absl::StatusOr<std::string> FileChecksum(const std::string& path) {
  StreamChecksum sum;
  const absl::Status read =
      ReadBlocks(path, [&](const char* data, size_t size) { sum.Update(data, size); });
  if (!read.ok()) return read;
  return sum.Hex();
}

absl::StatusOr<std::string> LegacyFileChecksum(const std::string& path) {
  uint64_t h = Fnv1a64("");
  const absl::Status read = ReadBlocks(path, [&](const char* data, size_t size) {
    h = Fnv1a64Continue(h, std::string_view(data, size));
  });
  if (!read.ok()) return read;
  return Hex64(h);
}

}  // namespace xmod
