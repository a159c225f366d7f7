// A small blocking HTTP/1.1 client over POSIX sockets, for http:// URLs only (no TLS): the
// benchmark client (bench-serving) and tests talk to a local server with it. One TCP connection
// per call, sent with "Connection: close". Bodies framed by Content-Length, by chunked
// transfer-encoding, or by the server closing the connection are all understood.
// Errors are values: every failure (bad URL, DNS, connection refused, timeout, a malformed or
// truncated response) comes back as a one-line Status naming the server; nothing throws.
// Thread-safety: the class holds no state; any number of threads may call it at once.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"

namespace mlaserve {

// Header (name, value) pairs in order. Names compare case-insensitively (HttpHeaderValue).
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The value of the first header called `name` (any case), or nullptr.
const std::string* HttpHeaderValue(const HttpHeaders& headers, std::string_view name);

struct ParsedUrl {
  std::string host;         // "127.0.0.1", "localhost", "::1" (brackets removed)
  int port = 80;            // 1..65535
  std::string target = "/"; // path plus any "?query"; always starts with '/'; no "#fragment"
};

struct HttpResponse {
  int status_code = 0;  // 200, 404, ...
  std::string reason;   // "OK"
  HttpHeaders headers;  // as received, names lower-cased
  std::string body;     // decoded: chunked framing removed
};

class HttpClient {
 public:
  // "http://host[:port][/path][?query]". IPv6 hosts go in brackets: http://[::1]:8080/x.
  // https:// and other schemes are refused ("no TLS").
  static Result<ParsedUrl> ParseUrl(std::string_view url);

  // Sends one request and reads the whole response (any status code: a 404 is a response, not
  // an error). `headers` are sent after Host, Content-Length and Connection, which the client
  // writes itself unless `headers` names them. A body is sent, with its Content-Length, when it
  // is non-empty or the method is POST/PUT/PATCH.
  // timeout_ms bounds connecting and every wait for the server's next bytes (an idle timeout,
  // not a deadline for the whole exchange); <= 0 waits forever.
  Result<HttpResponse> Request(std::string_view method, std::string_view url,
                               std::string_view body, const HttpHeaders& headers,
                               int timeout_ms) const;

  // Like Request, but hands the decoded body to on_data piece by piece as it arrives (piece
  // boundaries follow the network, not the server's writes or chunks; empty pieces are never
  // passed). When on_data returns false the connection is closed at once and Stream returns Ok.
  // A status other than 2xx is an error whose message carries the code and the start of the
  // body; on_data is not called for it. If `head` is given it receives the status line and
  // headers (its body stays empty) before the first on_data call.
  // on_data runs on the calling thread and must not call back into this connection.
  Status Stream(std::string_view method, std::string_view url, std::string_view body,
                const HttpHeaders& headers, int timeout_ms,
                FunctionRef<bool(std::string_view piece)> on_data,
                HttpResponse* head = nullptr) const;
};

}  // namespace mlaserve
