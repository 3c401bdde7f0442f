#include "orchestrator/service/auth.h"

namespace xmod {

bool IsLoopbackAddress(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool TokenMatches(const std::string& header, const std::string& token) {
  const std::string expected = "Bearer " + token;
  unsigned char diff = header.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>((i < header.size() ? header[i] : 0) ^ expected[i]);
  }
  return diff == 0;
}

}  // namespace xmod
