#include "server/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace mlaserve {
namespace {

constexpr size_t kMaxStatusLineBytes = 8 << 10;
constexpr size_t kMaxHeaderBytes = 64 << 10;  // status line + all header lines
constexpr size_t kMaxChunkLineBytes = 4 << 10;
constexpr size_t kReadBytes = 64 << 10;       // one recv() at most
constexpr size_t kErrorBodyBytes = 300;       // how much of a non-2xx body an error quotes

char LowerAscii(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = LowerAscii(c);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (LowerAscii(a[i]) != LowerAscii(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A printable, single-line excerpt of server bytes for an error message.
std::string Excerpt(std::string_view s, size_t max_bytes) {
  std::string out;
  for (char c : s.substr(0, max_bytes)) out += (c == '\r' || c == '\n' || c == '\t') ? ' ' : c;
  if (s.size() > max_bytes) out += "...";
  return out;
}

std::string HostPort(const ParsedUrl& url) {
  const bool ipv6 = url.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

// A connected socket and the bytes read from it but not yet consumed. Non-blocking underneath:
// every wait goes through poll() so that timeout_ms applies to it.
class Connection {
 public:
  Connection(const ParsedUrl& url, int timeout_ms) : where_(HostPort(url)), timeout_ms_(timeout_ms) {}
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const std::string& where() const { return where_; }

  Status Open(const ParsedUrl& url) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* addrs = nullptr;
    const int rc = ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &addrs);
    if (rc != 0) return Status::Error("cannot resolve '" + url.host + "': " + ::gai_strerror(rc));
    std::string last_error = "no address";
    for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
      Status s = ConnectOne(*a);
      if (s.ok()) {
        ::freeaddrinfo(addrs);
        return Status::Ok();
      }
      last_error = s.message();
    }
    ::freeaddrinfo(addrs);
    return Status::Error("connect to " + where_ + " failed: " + last_error);
  }

  Status SendAll(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        MLA_RETURN_IF_ERROR(Wait(POLLOUT, "sending the request to"));
        continue;
      }
      return Status::Error("sending the request to " + where_ + " failed: " + std::strerror(errno));
    }
    return Status::Ok();
  }

  std::string_view buffered() const { return std::string_view(buf_).substr(pos_); }
  void Consume(size_t num_bytes) { pos_ += num_bytes; }
  bool eof() const { return eof_; }
  bool received_any() const { return received_any_; }

  // Reads what the server has sent next (at least one byte) into the buffer, or sets eof().
  Status Fill() {
    if (pos_ > 0 && pos_ * 2 >= buf_.size()) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    char tmp[kReadBytes];
    for (;;) {
      const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (n > 0) {
        buf_.append(tmp, size_t(n));
        received_any_ = true;
        return Status::Ok();
      }
      if (n == 0) {
        eof_ = true;
        return Status::Ok();
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        MLA_RETURN_IF_ERROR(Wait(POLLIN, "waiting for a response from"));
        continue;
      }
      return Status::Error("reading from " + where_ + " failed: " + std::strerror(errno));
    }
  }

  // The next line without its CRLF (a bare LF is accepted too). `what` names the line in errors.
  Result<std::string> ReadLine(size_t max_bytes, const char* what) {
    size_t searched = 0;
    for (;;) {
      const std::string_view b = buffered();
      const size_t nl = b.find('\n', searched);
      if (nl != std::string_view::npos) {
        std::string line(b.substr(0, nl));
        if (!line.empty() && line.back() == '\r') line.pop_back();
        Consume(nl + 1);
        return line;
      }
      if (b.size() > max_bytes) {
        return Status::Error("malformed response from " + where_ + ": " + what + " longer than " +
                             std::to_string(max_bytes) + " bytes");
      }
      searched = b.size();
      MLA_RETURN_IF_ERROR(Fill());
      if (eof_) {
        if (!received_any_) return Status::Error(where_ + " closed the connection without a response");
        return Status::Error(where_ + " closed the connection in the middle of the " + what);
      }
    }
  }

 private:
  Status ConnectOne(const addrinfo& a) {
    const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
    if (fd < 0) return Status::Error(std::string("socket: ") + std::strerror(errno));
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
    if (::connect(fd_, a.ai_addr, a.ai_addrlen) != 0) {
      if (errno != EINPROGRESS) return Status::Error(std::strerror(errno));
      MLA_RETURN_IF_ERROR(Wait(POLLOUT, "connecting to"));
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) return Status::Error(std::strerror(err));
    }
    const int one = 1;  // requests are written in one piece; do not hold back the last segment
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return Status::Ok();
  }

  // Blocks until the socket is ready for `events`, or fails after timeout_ms_.
  Status Wait(short events, const char* doing) {
    pollfd p{.fd = fd_, .events = events, .revents = 0};
    for (;;) {
      const int n = ::poll(&p, 1, timeout_ms_ > 0 ? timeout_ms_ : -1);
      if (n > 0) return Status::Ok();  // errors and hang-ups surface in the next call
      if (n == 0) {
        return Status::Error(std::string("timed out after ") + std::to_string(timeout_ms_) + " ms " +
                             doing + " " + where_);
      }
      if (errno != EINTR) return Status::Error(std::string("poll: ") + std::strerror(errno));
    }
  }

  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0;  // buf_[pos_..] is unconsumed
  bool eof_ = false;
  bool received_any_ = false;
  std::string where_;  // "host:port", for messages
  int timeout_ms_;
};

bool SendsBody(std::string_view method, std::string_view body) {
  return !body.empty() || method == "POST" || method == "PUT" || method == "PATCH";
}

Result<std::string> BuildRequest(std::string_view method, const ParsedUrl& url,
                                 std::string_view body, const HttpHeaders& headers) {
  if (method.empty() || method.find_first_of(" \r\n") != std::string_view::npos) {
    return Status::Error("bad HTTP method '" + std::string(method) + "'");
  }
  for (const auto& [name, value] : headers) {
    if (name.empty() || name.find_first_of(": \r\n") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos) {
      return Status::Error("bad request header '" + Excerpt(name, 40) + "'");
    }
  }
  std::string req;
  req.reserve(256 + body.size());
  req.append(method).append(" ").append(url.target).append(" HTTP/1.1\r\n");
  if (!HttpHeaderValue(headers, "host")) {
    const bool ipv6 = url.host.find(':') != std::string::npos;
    req += "Host: " + (ipv6 ? "[" + url.host + "]" : url.host);
    if (url.port != 80) req += ":" + std::to_string(url.port);
    req += "\r\n";
  }
  if (SendsBody(method, body) && !HttpHeaderValue(headers, "content-length")) {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  if (!HttpHeaderValue(headers, "connection")) req += "Connection: close\r\n";
  for (const auto& [name, value] : headers) req += name + ": " + value + "\r\n";
  req += "\r\n";
  req.append(body);
  return req;
}

// Reads the status line and headers, skipping interim 1xx responses (100 Continue).
Status ReadHead(Connection& conn, HttpResponse* head) {
  for (;;) {
    auto status_line = conn.ReadLine(kMaxStatusLineBytes, "status line");
    if (!status_line.ok()) return status_line.status();
    const std::string& line = *status_line;
    // "HTTP/1.1 200 OK": version, a three-digit code, an optional reason.
    const bool shaped = line.size() >= 12 && line.compare(0, 7, "HTTP/1.") == 0 && line[8] == ' ' &&
                        std::isdigit(static_cast<unsigned char>(line[9])) &&
                        std::isdigit(static_cast<unsigned char>(line[10])) &&
                        std::isdigit(static_cast<unsigned char>(line[11])) &&
                        (line.size() == 12 || line[12] == ' ');
    if (!shaped) {
      return Status::Error("malformed response from " + conn.where() + ": bad status line '" +
                           Excerpt(line, 80) + "'");
    }
    head->status_code = std::stoi(line.substr(9, 3));
    head->reason = line.size() > 13 ? line.substr(13) : "";
    head->headers.clear();
    size_t header_bytes = line.size();
    for (;;) {
      auto header = conn.ReadLine(kMaxHeaderBytes, "headers");
      if (!header.ok()) return header.status();
      if (header->empty()) break;
      header_bytes += header->size();
      if (header_bytes > kMaxHeaderBytes) {
        return Status::Error("malformed response from " + conn.where() + ": headers longer than " +
                             std::to_string(kMaxHeaderBytes) + " bytes");
      }
      const size_t colon = header->find(':');
      if (colon == 0 || colon == std::string::npos) {
        return Status::Error("malformed response from " + conn.where() + ": bad header line '" +
                             Excerpt(*header, 80) + "'");
      }
      head->headers.emplace_back(Lower(std::string_view(*header).substr(0, colon)),
                                 std::string(Trim(std::string_view(*header).substr(colon + 1))));
    }
    const bool interim = head->status_code >= 100 && head->status_code < 200 && head->status_code != 101;
    if (!interim) return Status::Ok();
  }
}

// Passes `num_bytes` body bytes to sink as they arrive. *stopped is set when sink says stop.
Status ReadExact(Connection& conn, uint64_t num_bytes, FunctionRef<bool(std::string_view)> sink,
                 bool* stopped, const char* what) {
  uint64_t left = num_bytes;
  while (left > 0) {
    if (conn.buffered().empty()) {
      MLA_RETURN_IF_ERROR(conn.Fill());
      if (conn.eof()) {
        return Status::Error(conn.where() + " closed the connection in the middle of the " + what + " (" +
                             std::to_string(num_bytes - left) + " of " + std::to_string(num_bytes) +
                             " bytes received)");
      }
    }
    const std::string_view piece = conn.buffered().substr(0, size_t(std::min<uint64_t>(left, conn.buffered().size())));
    conn.Consume(piece.size());
    left -= piece.size();
    if (!sink(piece)) {
      *stopped = true;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status ReadChunked(Connection& conn, FunctionRef<bool(std::string_view)> sink, bool* stopped) {
  for (;;) {
    auto size_line = conn.ReadLine(kMaxChunkLineBytes, "chunk size line");
    if (!size_line.ok()) return size_line.status();
    // "1a3f[;extension]": hex digits, optionally followed by extensions we ignore.
    const std::string_view digits = Trim(std::string_view(*size_line).substr(0, size_line->find(';')));
    uint64_t chunk_bytes = 0;
    bool valid = !digits.empty() && digits.size() <= 15;
    for (char c : digits) {
      const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (LowerAscii(c) >= 'a' && LowerAscii(c) <= 'f') ? LowerAscii(c) - 'a' + 10 : -1;
      if (v < 0) valid = false;
      chunk_bytes = chunk_bytes * 16 + uint64_t(std::max(v, 0));
    }
    if (!valid) {
      return Status::Error("malformed response from " + conn.where() + ": bad chunk size line '" +
                           Excerpt(*size_line, 40) + "'");
    }
    if (chunk_bytes == 0) {  // the last chunk; then optional trailers and an empty line
      for (;;) {
        auto trailer = conn.ReadLine(kMaxHeaderBytes, "trailers");
        if (!trailer.ok()) return trailer.status();
        if (trailer->empty()) return Status::Ok();
      }
    }
    MLA_RETURN_IF_ERROR(ReadExact(conn, chunk_bytes, sink, stopped, "chunked body"));
    if (*stopped) return Status::Ok();
    auto end = conn.ReadLine(kMaxChunkLineBytes, "chunked body");
    if (!end.ok()) return end.status();
    if (!end->empty()) {
      return Status::Error("malformed response from " + conn.where() + ": chunk longer than its size " +
                           std::to_string(chunk_bytes));
    }
  }
}

// Reads the body as the head frames it: chunked, Content-Length, or until the server closes.
Status ReadBody(Connection& conn, std::string_view method, const HttpResponse& head,
                FunctionRef<bool(std::string_view)> sink, bool* stopped) {
  const int code = head.status_code;
  if (method == "HEAD" || code == 204 || code == 304 || (code >= 100 && code < 200)) return Status::Ok();
  if (const std::string* te = HttpHeaderValue(head.headers, "transfer-encoding")) {
    const std::string codings = Lower(*te);
    const size_t last_comma = codings.rfind(',');
    const std::string_view last = Trim(std::string_view(codings).substr(last_comma == std::string::npos ? 0 : last_comma + 1));
    if (last == "chunked") return ReadChunked(conn, sink, stopped);
  } else if (const std::string* cl = HttpHeaderValue(head.headers, "content-length")) {
    uint64_t num_bytes = 0;
    bool valid = !cl->empty() && cl->size() <= 15;
    for (char c : *cl) {
      if (!std::isdigit(static_cast<unsigned char>(c))) valid = false;
      num_bytes = num_bytes * 10 + uint64_t(c - '0');
    }
    if (!valid) {
      return Status::Error("malformed response from " + conn.where() + ": bad Content-Length '" +
                           Excerpt(*cl, 40) + "'");
    }
    return ReadExact(conn, num_bytes, sink, stopped, "body");
  }
  for (;;) {  // the body ends when the server closes the connection
    if (!conn.buffered().empty()) {
      const std::string_view piece = conn.buffered();
      conn.Consume(piece.size());
      if (!sink(piece)) {
        *stopped = true;
        return Status::Ok();
      }
    }
    MLA_RETURN_IF_ERROR(conn.Fill());
    if (conn.eof()) return Status::Ok();
  }
}

// Parses the URL, connects, sends the request and reads the head into *head; then `read_body`
// reads the body from the open connection, which closes when this returns.
Status Exchange(std::string_view method, std::string_view url, std::string_view body,
                const HttpHeaders& headers, int timeout_ms, HttpResponse* head,
                FunctionRef<Status(Connection& conn)> read_body) {
  auto parsed = HttpClient::ParseUrl(url);
  if (!parsed.ok()) return parsed.status();
  auto request = BuildRequest(method, *parsed, body, headers);
  if (!request.ok()) return request.status();
  Connection conn(*parsed, timeout_ms);
  MLA_RETURN_IF_ERROR(conn.Open(*parsed));
  const Status sent = conn.SendAll(*request);
  // A server may answer before reading the whole body (413 for an oversized one) and close:
  // the send then fails, but the answer is what the caller needs.
  const Status got_head = ReadHead(conn, head);
  if (!got_head.ok()) return sent.ok() ? got_head : sent;
  return read_body(conn);
}

}  // namespace

const std::string* HttpHeaderValue(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (EqualsIgnoreCase(n, name)) return &v;
  }
  return nullptr;
}

Result<ParsedUrl> HttpClient::ParseUrl(std::string_view url) {
  const auto bad = [&](const std::string& why) {
    return Status::Error("bad URL '" + Excerpt(url, 200) + "': " + why);
  };
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return bad("contains a space or control character");
  }
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return bad("want http://host[:port][/path]");
  if (!EqualsIgnoreCase(url.substr(0, scheme_end), "http")) {
    return bad("scheme '" + std::string(url.substr(0, scheme_end)) + "' is not supported (only http://, no TLS)");
  }
  std::string_view rest = url.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view target = authority_end == std::string_view::npos ? "" : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) return bad("user info is not supported");

  ParsedUrl out;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in host");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("unexpected text after ']'");
    if (!after.empty()) port_text = after.substr(1);
    if (!after.empty() && port_text.empty()) return bad("empty port");
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return bad("empty port");
    }
    if (out.host.find(':') != std::string::npos) return bad("IPv6 hosts go in brackets");
  }
  if (out.host.empty()) return bad("no host");
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || port > 65535) return bad("port must be 1..65535");
      port = port * 10 + (c - '0');
    }
    if (port < 1 || port > 65535) return bad("port must be 1..65535");
    out.port = port;
  }
  target = target.substr(0, target.find('#'));
  if (target.empty()) out.target = "/";
  else if (target.front() == '?') out.target = "/" + std::string(target);
  else out.target = std::string(target);
  return out;
}

Result<HttpResponse> HttpClient::Request(std::string_view method, std::string_view url,
                                         std::string_view body, const HttpHeaders& headers,
                                         int timeout_ms) const {
  HttpResponse response;
  auto read_body = [&](Connection& conn) {
    bool stopped = false;
    auto append = [&](std::string_view piece) {
      response.body.append(piece);
      return true;
    };
    return ReadBody(conn, method, response, append, &stopped);
  };
  MLA_RETURN_IF_ERROR(Exchange(method, url, body, headers, timeout_ms, &response, read_body));
  return response;
}

Status HttpClient::Stream(std::string_view method, std::string_view url, std::string_view body,
                          const HttpHeaders& headers, int timeout_ms,
                          FunctionRef<bool(std::string_view piece)> on_data, HttpResponse* head) const {
  HttpResponse response;
  auto read_body = [&](Connection& conn) {
    bool stopped = false;
    if (response.status_code >= 200 && response.status_code < 300) {
      if (head != nullptr) *head = response;
      return ReadBody(conn, method, response, on_data, &stopped);
    }
    std::string start;  // the first bytes of the body, for the message; the rest is not read
    auto keep = [&](std::string_view piece) {
      start.append(piece.substr(0, kErrorBodyBytes - start.size()));
      return start.size() < kErrorBodyBytes;
    };
    Status read = ReadBody(conn, method, response, keep, &stopped);
    std::string message = "HTTP " + std::to_string(response.status_code) +
                          (response.reason.empty() ? "" : " " + response.reason) + " from " + conn.where();
    if (!start.empty()) message += ": " + Excerpt(start, kErrorBodyBytes);
    else if (!read.ok()) message += " (" + read.message() + ")";
    return Status::Error(message);
  };
  return Exchange(method, url, body, headers, timeout_ms, &response, read_body);
}

}  // namespace mlaserve
