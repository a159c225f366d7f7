// The Server-Sent-Events parser (server/sse.h) on arbitrary bytes: fed whole, and in pieces whose
// sizes come from the first byte. The spec's parsing does not depend on how the stream is cut,
// so both must emit the same events.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "server/sse.h"

namespace {

std::vector<std::string> Events(std::string_view stream, size_t piece_bytes, bool* pending) {
  std::vector<std::string> events;
  mlaserve::SseParser parser;
  while (!stream.empty()) {
    const std::string_view piece = stream.substr(0, piece_bytes);
    parser.Feed(piece, [&](const mlaserve::SseEvent& e) {
      events.push_back(e.event + '\n' + e.id + '\n' + e.data);
    });
    stream.remove_prefix(piece.size());
  }
  *pending = parser.has_pending();
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece_bytes = 1 + data[0] % 8;
  const std::string_view stream = mlaserve::fuzz::AsText(data + 1, size - 1);
  bool whole_pending = false;
  bool pieces_pending = false;
  const std::vector<std::string> whole = Events(stream, stream.size() + 1, &whole_pending);
  const std::vector<std::string> pieces = Events(stream, piece_bytes, &pieces_pending);
  if (whole != pieces || whole_pending != pieces_pending) __builtin_trap();
  return 0;
}
