#include "server/request_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>

#include "core/check.h"

namespace mlaserve {

std::string NewRequestId(std::string_view prefix) {
  uint8_t bytes[16];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    MLA_CHECK(n > 0);  // getrandom cannot fail for 16 bytes once the pool is initialised
    filled += size_t(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (const uint8_t b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

}  // namespace mlaserve
