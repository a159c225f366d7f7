// The bytes of responses: status lines and heads, and the OpenAI-shaped JSON errors the server
// writes itself. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlaserve {

// {"error":{"message":"...","type":"...","param":null,"code":STATUS}} (OpenAI's error shape).
// The message is JSON-escaped; bytes that are not valid UTF-8 become U+FFFD.
std::string JsonError(int status, std::string_view message, std::string_view type);

// The error type for a status the server generates: "invalid_request_error" for 4xx,
// "server_error" otherwise.
std::string_view JsonErrorType(int status);

// Appends `text` as a JSON string literal (with quotes) to `out`.
void AppendJsonString(std::string& out, std::string_view text);

// "OK", "Not Found", ...; "Unknown" for codes it does not list.
std::string_view HttpReasonPhrase(int status);

enum class HttpBodyFraming {
  kContentLength,  // Content-Length: content_length_bytes
  kChunked,        // Transfer-Encoding: chunked
  kUntilClose,     // no length: the body ends when the server closes (HTTP/1.0 streams)
};

struct HttpResponseHead {
  int status = 200;
  std::string_view content_type;  // header omitted when empty
  HttpBodyFraming framing = HttpBodyFraming::kContentLength;
  size_t content_length_bytes = 0;
  // The Connection header: "close" when the server closes after this response, "keep-alive"
  // to keep an HTTP/1.0 connection open, empty for HTTP/1.1's default persistence.
  std::string_view connection;
  // Written as given, after the server's own fields. Dropped: fields whose name is not a token
  // or whose value holds CR, LF or NUL (no header injection), and Content-Length,
  // Transfer-Encoding and Connection (the server frames the response).
  const std::vector<std::pair<std::string, std::string>>* extra_headers = nullptr;
};

// "HTTP/1.1 200 OK\r\n...fields...\r\n\r\n".
std::string FormatResponseHead(const HttpResponseHead& head);

// A whole response (head and body) for an error the server answers itself (400, 408, 413, 431,
// 503, ...): a JsonError body of JsonErrorType(status), and "Connection: close".
std::string ErrorResponse(
    int status, std::string_view message,
    const std::vector<std::pair<std::string, std::string>>& extra_headers = {});

}  // namespace mlaserve
