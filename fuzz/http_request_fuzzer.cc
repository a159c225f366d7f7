// The HTTP/1.x request parser (server/http_parser.h) on arbitrary bytes, fed whole and then again
// in pieces whose sizes come from the input's first byte, as a connection would see them. Both
// feedings must reach the same requests; every pipelined request is taken and the parser reset.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "server/http_parser.h"

namespace {

using mlaserve::HttpParseLimits;
using mlaserve::HttpRequestParser;

// Small limits so that the limit paths (431, 413) are reached by small inputs.
constexpr HttpParseLimits kLimits{.max_header_bytes = 2048, .max_body_bytes = 8192};

// What one feeding produced: each finished request's method, target and body, then the final
// state (and error status).
std::vector<std::string> FeedAll(std::string_view input, size_t piece_bytes) {
  std::vector<std::string> seen;
  HttpRequestParser parser(kLimits);
  while (true) {
    const std::string_view piece = input.substr(0, piece_bytes);
    const size_t used = parser.Feed(piece);
    if (used > piece.size()) __builtin_trap();
    input.remove_prefix(used);
    if (parser.state() == HttpRequestParser::State::kDone) {
      const bool head_ok = parser.head_complete();
      (void)parser.keep_alive();
      (void)parser.expects_continue();
      mlaserve::HttpRequest request = parser.TakeRequest();
      if (!head_ok) __builtin_trap();
      // The dashboard's ?key=: decoding never grows the value past the target.
      if (auto key = request.QueryParameter("key"); key && key->size() > request.target.size()) __builtin_trap();
      seen.push_back(request.method + " " + request.target + " " + request.body);
      parser.Reset();
      continue;
    }
    if (parser.state() == HttpRequestParser::State::kError) {
      const int status = parser.error().status;
      if (status < 400 || status > 599) __builtin_trap();
      seen.push_back("error " + std::to_string(status));
      break;
    }
    // Not done and not failed: the parser must have taken the whole piece.
    if (used != piece.size()) __builtin_trap();
    if (input.empty()) {
      seen.push_back(parser.started() ? "incomplete" : "idle");
      break;
    }
  }
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece_bytes = 1 + data[0] % 16;
  const std::string_view input = mlaserve::fuzz::AsText(data + 1, size - 1);
  const std::vector<std::string> whole = FeedAll(input, input.size() + 1);
  const std::vector<std::string> pieces = FeedAll(input, piece_bytes);
  if (whole != pieces) __builtin_trap();  // the split must not change what is parsed
  return 0;
}
