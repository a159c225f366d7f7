// Incremental HTTP/1.x request parser: request line, headers, and a body framed by
// Content-Length or Transfer-Encoding: chunked (decoded). It owns no socket: the connection feeds
// it whatever bytes arrive and asks what state it is in. Memory is bounded by the limits: the
// head (request line + headers) by max_header_bytes, chunked trailers by the same amount again,
// the decoded body by max_body_bytes. One parser serves one connection on one thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "server/http_request.h"

namespace mlaserve {

struct HttpParseLimits {
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 16 << 20;
};

// A request the server answers with `status` (400, 413, 417, 431, 501, 505) and then closes.
struct HttpParseError {
  int status = 0;
  std::string message;  // for the client; never echoes the client's bytes
};

class HttpRequestParser {
 public:
  enum class State {
    kHead,   // reading the request line and headers
    kBody,   // head parsed; reading the body
    kDone,   // one whole request is ready: request() / TakeRequest()
    kError,  // error() says what to answer
  };

  explicit HttpRequestParser(HttpParseLimits limits) : limits_(limits) {}

  // Consumes a prefix of `data` and returns how many bytes it used: all of them while the
  // request is incomplete, fewer when the request ends (the rest is the next, pipelined request)
  // or at an error. In kDone or kError it consumes nothing until Reset().
  size_t Feed(std::string_view data);

  // Forgets the current request (keeping buffers' capacity) and waits for the next one.
  void Reset();

  State state() const { return state_; }
  // Some byte of this request has arrived (blank lines before a request line do not count).
  bool started() const { return !head_.empty() || state_ != State::kHead; }
  bool head_complete() const { return state_ == State::kBody || state_ == State::kDone; }

  // Valid once head_complete():
  int http_minor_version() const { return minor_version_; }  // 0 (HTTP/1.0) or 1
  // The client allows another request on this connection (HTTP/1.1 unless "Connection: close";
  // HTTP/1.0 only with "Connection: keep-alive").
  bool keep_alive() const { return keep_alive_; }
  // The client sent "Expect: 100-continue" and waits for "100 Continue" before its body: true
  // only while the body is still to come.
  bool expects_continue() const { return expects_continue_ && state_ == State::kBody; }
  const HttpRequest& request() const { return request_; }
  // Moves the finished request out (state kDone); the parser must be Reset() before reuse.
  HttpRequest TakeRequest() { return std::move(request_); }

  const HttpParseError& error() const { return error_; }  // valid in kError

 private:
  enum class ChunkState { kSizeLine, kData, kDataEnd, kTrailer };
  enum class LineResult { kNeedMore, kLine, kTooLong };

  size_t FeedHead(std::string_view data);
  size_t FeedBody(std::string_view data);
  size_t FeedChunked(std::string_view data);
  void ParseHead();
  bool ParseRequestLine(std::string_view line);
  bool ParseHeaderLine(std::string_view line);
  bool DecideFraming();
  // Collects bytes into line_ up to and including '\n'; `used` advances over what it took.
  LineResult TakeLine(std::string_view data, size_t& used, size_t max_line_bytes);
  void Fail(int status, std::string message);

  HttpParseLimits limits_;
  State state_ = State::kHead;
  HttpParseError error_;

  std::string head_;       // request line + header lines so far, with their line ends
  size_t line_start_ = 0;  // offset in head_ of the line being received
  HttpRequest request_;
  int minor_version_ = 1;
  bool keep_alive_ = true;
  bool expects_continue_ = false;

  bool chunked_ = false;
  size_t body_left_bytes_ = 0;  // Content-Length: bytes still to come; chunked: left in this chunk
  ChunkState chunk_state_ = ChunkState::kSizeLine;
  std::string line_;            // a chunk-size line, a chunk's CRLF, or a trailer line
  size_t trailer_bytes_ = 0;
};

}  // namespace mlaserve
