#include "common/id.h"

#include <cstdio>

namespace xmod {

uint64_t Fnv1a64Continue(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t Fnv1a64(std::string_view bytes) { return Fnv1a64Continue(0xcbf29ce484222325ULL, bytes); }

std::string HexId(std::string_view bytes) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Fnv1a64(bytes)));
  return std::string(buf, 16);
}

}  // namespace xmod
