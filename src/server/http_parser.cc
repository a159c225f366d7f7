// Incremental HTTP/1.x request parser; see http_parser.h. Framing rules follow RFC 9112: a
// request with both Transfer-Encoding and Content-Length, or with conflicting lengths, is
// rejected rather than guessed at (request smuggling).
#include "server/http_parser.h"

#include <algorithm>
#include <cstdint>

#include "server/http_syntax.h"

namespace mlaserve {
namespace {

// Longest chunk-size line accepted (size plus extensions, which are ignored).
constexpr size_t kMaxChunkSizeLineBytes = 4096;

// Field values: visible ASCII, space, tab, and any byte >= 0x80 (obs-text).
bool IsFieldValue(std::string_view text) {
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 ? byte != '\t' : byte == 0x7f) return false;
  }
  return true;
}

std::string_view TrimWhitespace(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Calls visit(item) for each trimmed, non-empty item of a comma-separated field value.
template <typename Visit>
void ForEachListItem(std::string_view value, Visit visit) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = TrimWhitespace(value.substr(0, comma));
    if (!item.empty()) visit(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

// Decimal digits only; values too large for size_t saturate to SIZE_MAX. false when not digits.
bool ParseDecimal(std::string_view text, size_t& value) {
  if (text.empty()) return false;
  value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    size_t digit = static_cast<size_t>(c - '0');
    value = value > (SIZE_MAX - digit) / 10 ? SIZE_MAX : value * 10 + digit;
  }
  return true;
}

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path of a request target: origin-form "/a/b?q" -> "/a/b"; absolute-form
// "http://host/a?q" -> "/a"; asterisk-form "*" stays "*".
std::string PathOf(std::string_view target) {
  target = target.substr(0, target.find('?'));
  size_t scheme_end = target.find("://");
  if (!target.empty() && target.front() != '/' && scheme_end != std::string_view::npos) {
    size_t path_begin = target.find('/', scheme_end + 3);
    return path_begin == std::string_view::npos ? "/" : std::string(target.substr(path_begin));
  }
  return std::string(target);
}

}  // namespace

void HttpRequestParser::Reset() {
  state_ = State::kHead;
  error_ = {};
  head_.clear();
  line_start_ = 0;
  request_ = {};
  minor_version_ = 1;
  keep_alive_ = true;
  expects_continue_ = false;
  chunked_ = false;
  body_left_bytes_ = 0;
  chunk_state_ = ChunkState::kSizeLine;
  line_.clear();
  trailer_bytes_ = 0;
}

void HttpRequestParser::Fail(int status, std::string message) {
  state_ = State::kError;
  error_ = {.status = status, .message = std::move(message)};
}

size_t HttpRequestParser::Feed(std::string_view data) {
  size_t used = 0;
  if (state_ == State::kHead) used += FeedHead(data);
  if (state_ == State::kBody) used += FeedBody(data.substr(used));
  return used;
}

size_t HttpRequestParser::FeedHead(std::string_view data) {
  size_t used = 0;
  while (used < data.size()) {
    // Blank lines before a request line are ignored (RFC 9112 section 2.2), e.g. the stray CRLF
    // some clients send after a POST body.
    if (head_.empty() && (data[used] == '\r' || data[used] == '\n')) {
      ++used;
      continue;
    }
    size_t newline = data.find('\n', used);
    size_t end = newline == std::string_view::npos ? data.size() : newline + 1;
    if (head_.size() + (end - used) > limits_.max_header_bytes) {
      Fail(431, "request header fields too large");
      return used;
    }
    head_.append(data.substr(used, end - used));
    used = end;
    if (newline == std::string_view::npos) break;
    std::string_view line(head_.data() + line_start_, head_.size() - 1 - line_start_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      ParseHead();
      break;
    }
    line_start_ = head_.size();
  }
  return used;
}

void HttpRequestParser::ParseHead() {
  std::string_view rest = head_;
  bool first_line = true;
  while (!rest.empty()) {
    size_t newline = rest.find('\n');
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline + 1);  // FeedHead stored whole lines only
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;  // the blank line that ends the head
    if (line.find('\r') != std::string_view::npos) {
      Fail(400, "bare CR in the request head");
      return;
    }
    bool ok = first_line ? ParseRequestLine(line) : ParseHeaderLine(line);
    if (!ok) return;
    first_line = false;
  }
  if (!DecideFraming()) return;
  state_ = (chunked_ || body_left_bytes_ > 0) ? State::kBody : State::kDone;
}

bool HttpRequestParser::ParseRequestLine(std::string_view line) {
  size_t first_space = line.find(' ');
  size_t second_space =
      first_space == std::string_view::npos ? first_space : line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos) {
    Fail(400, "malformed request line");
    return false;
  }
  std::string_view method = line.substr(0, first_space);
  std::string_view target = line.substr(first_space + 1, second_space - first_space - 1);
  std::string_view version = line.substr(second_space + 1);
  if (!IsHttpToken(method)) {
    Fail(400, "malformed request method");
    return false;
  }
  if (target.empty()) {
    Fail(400, "empty request target");
    return false;
  }
  for (char c : target) {
    auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      Fail(400, "malformed request target");
      return false;
    }
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    Fail(400, "malformed HTTP version");
    return false;
  }
  if (version[5] != '1') {
    Fail(505, "HTTP version not supported (use HTTP/1.1)");
    return false;
  }
  minor_version_ = version[7] == '0' ? 0 : 1;  // 1.2 and later speak 1.1
  request_.method.assign(method);
  request_.target.assign(target);
  request_.path = PathOf(target);
  return true;
}

bool HttpRequestParser::ParseHeaderLine(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    Fail(400, "obsolete header line folding is not supported");
    return false;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || !IsHttpToken(line.substr(0, colon))) {
    Fail(400, "malformed header field");
    return false;
  }
  std::string_view value = TrimWhitespace(line.substr(colon + 1));
  if (!IsFieldValue(value)) {
    Fail(400, "invalid character in a header value");
    return false;
  }
  std::string name(line.substr(0, colon));
  for (char& c : name) c = ToLowerAscii(c);
  request_.headers.emplace_back(std::move(name), std::string(value));
  return true;
}

bool HttpRequestParser::DecideFraming() {
  bool has_length = false;
  size_t content_length = 0;
  bool has_transfer_encoding = false;
  int num_codings = 0;
  bool last_coding_is_chunked = false;
  bool connection_close = false;
  bool connection_keep_alive = false;
  const std::string* expect = nullptr;
  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      // "5" or, from some proxies, "5, 5": every value must agree.
      bool valid = true;
      bool any = false;
      ForEachListItem(value, [&](std::string_view item) {
        size_t length = 0;
        any = true;
        if (!ParseDecimal(item, length) || (has_length && length != content_length)) valid = false;
        has_length = true;
        content_length = length;
      });
      if (!valid || !any) {
        Fail(400, "invalid Content-Length");
        return false;
      }
    } else if (name == "transfer-encoding") {
      has_transfer_encoding = true;
      ForEachListItem(value, [&](std::string_view item) {
        ++num_codings;
        last_coding_is_chunked = EqualsIgnoreCaseAscii(item, "chunked");
      });
    } else if (name == "connection") {
      ForEachListItem(value, [&](std::string_view item) {
        if (EqualsIgnoreCaseAscii(item, "close")) connection_close = true;
        if (EqualsIgnoreCaseAscii(item, "keep-alive")) connection_keep_alive = true;
      });
    } else if (name == "expect") {
      expect = &value;
    }
  }
  keep_alive_ = !connection_close && (minor_version_ == 1 || connection_keep_alive);

  if (has_transfer_encoding) {
    if (minor_version_ == 0) {
      Fail(400, "Transfer-Encoding is not allowed in HTTP/1.0");
      return false;
    }
    if (has_length) {
      Fail(400, "both Transfer-Encoding and Content-Length");
      return false;
    }
    if (!last_coding_is_chunked) {
      Fail(400, "Transfer-Encoding must end with chunked");
      return false;
    }
    if (num_codings != 1) {
      Fail(501, "only the chunked transfer coding is supported");
      return false;
    }
    chunked_ = true;
  } else if (has_length) {
    if (content_length > limits_.max_body_bytes) {
      Fail(413, "request body too large (limit " + std::to_string(limits_.max_body_bytes) +
                    " bytes)");
      return false;
    }
    body_left_bytes_ = content_length;
  }

  // HTTP/1.0 clients cannot expect 100 Continue; their Expect is ignored (RFC 9110 10.1.1).
  if (expect != nullptr && minor_version_ == 1) {
    if (!EqualsIgnoreCaseAscii(*expect, "100-continue")) {
      Fail(417, "unsupported Expect value (only 100-continue)");
      return false;
    }
    expects_continue_ = true;
  }
  return true;
}

HttpRequestParser::LineResult HttpRequestParser::TakeLine(std::string_view data, size_t& used,
                                                          size_t max_line_bytes) {
  size_t newline = data.find('\n', used);
  size_t end = newline == std::string_view::npos ? data.size() : newline + 1;
  if (line_.size() + (end - used) > max_line_bytes) return LineResult::kTooLong;
  line_.append(data.substr(used, end - used));
  used = end;
  return newline == std::string_view::npos ? LineResult::kNeedMore : LineResult::kLine;
}

size_t HttpRequestParser::FeedBody(std::string_view data) {
  if (chunked_) return FeedChunked(data);
  size_t take = std::min(body_left_bytes_, data.size());
  request_.body.append(data.substr(0, take));
  body_left_bytes_ -= take;
  if (body_left_bytes_ == 0) state_ = State::kDone;
  return take;
}

size_t HttpRequestParser::FeedChunked(std::string_view data) {
  size_t used = 0;
  while (state_ == State::kBody && used < data.size()) {
    if (chunk_state_ == ChunkState::kData) {
      size_t take = std::min(body_left_bytes_, data.size() - used);
      request_.body.append(data.substr(used, take));
      used += take;
      body_left_bytes_ -= take;
      if (body_left_bytes_ == 0) chunk_state_ = ChunkState::kDataEnd;
      continue;
    }
    const size_t trailer_room_bytes =
        limits_.max_header_bytes - std::min(trailer_bytes_, limits_.max_header_bytes);
    const size_t max_line_bytes =
        chunk_state_ == ChunkState::kTrailer ? trailer_room_bytes : kMaxChunkSizeLineBytes;
    LineResult taken = TakeLine(data, used, max_line_bytes);
    if (taken == LineResult::kTooLong) {
      if (chunk_state_ == ChunkState::kTrailer) {
        Fail(431, "chunked trailer fields too large");
      } else {
        Fail(400, "malformed chunked body");
      }
      return used;
    }
    if (taken == LineResult::kNeedMore) break;
    std::string_view line = line_;
    line.remove_suffix(1);  // '\n'
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

    switch (chunk_state_) {
      case ChunkState::kSizeLine: {
        size_t chunk_bytes = 0;
        size_t num_digits = 0;
        for (; num_digits < line.size(); ++num_digits) {
          int digit = HexDigitValue(line[num_digits]);
          if (digit < 0) break;
          chunk_bytes =
              chunk_bytes > (SIZE_MAX >> 4) ? SIZE_MAX : (chunk_bytes << 4) | size_t(digit);
        }
        std::string_view after = line.substr(num_digits);
        bool extension_follows =
            after.empty() || after.front() == ';' || after.front() == ' ' || after.front() == '\t';
        if (num_digits == 0 || !extension_follows) {
          Fail(400, "malformed chunk size");
          return used;
        }
        if (chunk_bytes > limits_.max_body_bytes - request_.body.size()) {
          Fail(413, "request body too large (limit " + std::to_string(limits_.max_body_bytes) +
                        " bytes)");
          return used;
        }
        body_left_bytes_ = chunk_bytes;
        chunk_state_ = chunk_bytes == 0 ? ChunkState::kTrailer : ChunkState::kData;
        break;
      }
      case ChunkState::kDataEnd:
        if (!line.empty()) {
          Fail(400, "chunk data longer than its size");
          return used;
        }
        chunk_state_ = ChunkState::kSizeLine;
        break;
      case ChunkState::kTrailer:
        // Trailer fields are read and dropped: no handler needs them.
        trailer_bytes_ += line_.size();
        if (line.empty()) state_ = State::kDone;
        break;
      case ChunkState::kData:
        break;  // handled above
    }
    line_.clear();
  }
  return used;
}

std::optional<std::string> HttpRequest::QueryParameter(std::string_view name) const {
  const size_t q = target.find('?');
  if (q == std::string::npos) return std::nullopt;
  std::string_view query = std::string_view(target).substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        value += ' ';
      } else if (raw[i] == '%' && i + 2 < raw.size() && HexDigitValue(raw[i + 1]) >= 0 && HexDigitValue(raw[i + 2]) >= 0) {
        value += char(HexDigitValue(raw[i + 1]) * 16 + HexDigitValue(raw[i + 2]));
        i += 2;
      } else {
        value += raw[i];
      }
    }
    return value;
  }
  return std::nullopt;
}

}  // namespace mlaserve
