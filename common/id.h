// Stable content hashes for job ids. The hash is FNV-1a (64 bit), written here
// because no packaged dependency offers a stable, platform-independent hash
// (std::hash and absl::Hash are allowed to change between builds).
#ifndef XMOD_COMMON_ID_H_
#define XMOD_COMMON_ID_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace xmod {

uint64_t Fnv1a64(std::string_view bytes);
// The hash of earlier bytes (h, as Fnv1a64 returned it) extended by `bytes`:
// Fnv1a64Continue(Fnv1a64(a), b) == Fnv1a64(a + b).
uint64_t Fnv1a64Continue(uint64_t h, std::string_view bytes);

// 16 lower-case hex digits of Fnv1a64(bytes).
std::string HexId(std::string_view bytes);

}  // namespace xmod

#endif  // XMOD_COMMON_ID_H_
