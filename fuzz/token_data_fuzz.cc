// libFuzzer target: the token-folder reader. The input is split into meta.json and
// train.bin/val.bin at its first two NUL bytes; any folder opens or is a clear
// error, and an opened one reads every token within its size.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/token_data.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir =
      (std::filesystem::temp_directory_path() / ("xmod_token_fuzz_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t a = input.find('\0');
  const size_t b = a == std::string::npos ? std::string::npos : input.find('\0', a + 1);
  Write(dir + "/meta.json", input.substr(0, a));
  Write(dir + "/train.bin", a == std::string::npos ? "" : input.substr(a + 1, b - a - 1));
  Write(dir + "/val.bin", b == std::string::npos ? "" : input.substr(b + 1));
  auto dataset = xmod::TokenDataset::Open(dir, 0);
  if (!dataset.ok()) return 0;
  uint64_t sum = 0;
  for (const xmod::TokenFile* f : {&(*dataset)->train(), &(*dataset)->val()}) {
    for (int64_t i = 0; i < f->size(); ++i) sum += (*f)[i];
  }
  return sum == 0xdeadbeefdeadbeefULL ? 1 : 0;  // keep the reads
}
