// One connection's loop and its HttpResponseWriter; see http_connection.h.
#include "server/http_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <string>

#include "core/check.h"
#include "server/http_parser.h"
#include "server/http_response.h"

namespace mlaserve {
namespace {

constexpr size_t kReadChunkBytes = 16 << 10;
// After a response that ends the connection, request bytes still in flight are read and dropped
// for a short while before close(): closing with unread bytes sends a RST, which can destroy
// the response before the client has read it.
constexpr int kLingerMs = 500;
constexpr size_t kLingerMaxBytes = 1 << 20;

using StringViews = std::span<const std::string_view>;

class ConnectionResponseWriter final : public HttpResponseWriter {
 public:
  enum class Phase { kNothingSent, kSent, kStreaming, kStreamEnded };

  // client_keep_alive: the request allows another one after it. http10: the client speaks
  // HTTP/1.0 (no chunked responses).
  ConnectionResponseWriter(int fd, bool client_keep_alive, bool http10, int stall_timeout_ms,
                           const std::atomic<bool>& stopping)
      : fd_(fd),
        client_keep_alive_(client_keep_alive),
        http10_(http10),
        stall_timeout_ms_(stall_timeout_ms),
        stopping_(stopping) {}

  void Send(int status, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& extra_headers) override {
    if (phase_ != Phase::kNothingSent) return;
    phase_ = Phase::kSent;
    keep_alive_ = client_keep_alive_ && !stopping_.load(std::memory_order_relaxed);
    std::string head = FormatResponseHead({.status = status,
                                           .content_type = content_type,
                                           .framing = HttpBodyFraming::kContentLength,
                                           .content_length_bytes = body.size(),
                                           .connection = ConnectionField(),
                                           .extra_headers = &extra_headers});
    const std::string_view parts[] = {head, body};
    Transmit(parts);
  }

  void BeginStream(int status, std::string_view content_type) override {
    if (phase_ != Phase::kNothingSent) return;
    phase_ = Phase::kStreaming;
    // An HTTP/1.0 client cannot read chunks: it gets the raw bytes, ended by close.
    keep_alive_ = client_keep_alive_ && !http10_ && !stopping_.load(std::memory_order_relaxed);
    std::string head = FormatResponseHead(
        {.status = status,
         .content_type = content_type,
         .framing = http10_ ? HttpBodyFraming::kUntilClose : HttpBodyFraming::kChunked,
         .connection = ConnectionField()});
    const std::string_view parts[] = {head};
    Transmit(parts);
  }

  bool Write(std::string_view data) override {
    if (phase_ != Phase::kStreaming || ClientGone()) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    if (http10_) {
      const std::string_view parts[] = {data};
      return Transmit(parts);
    }
    char size_line[24];
    int size_line_bytes = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
    const std::string_view parts[] = {
        std::string_view(size_line, static_cast<size_t>(size_line_bytes)), data, "\r\n"};
    return Transmit(parts);
  }

  void EndStream() override {
    if (phase_ != Phase::kStreaming) return;
    phase_ = Phase::kStreamEnded;
    if (http10_) return;  // the close ends it
    const std::string_view parts[] = {"0\r\n\r\n"};
    Transmit(parts);
  }

  bool ClientGone() override {
    if (!gone_ && PeerClosed(fd_)) gone_ = true;
    return gone_;
  }

  Phase phase() const { return phase_; }

  // The connection may carry another request: the response is complete, went out whole, and
  // both sides agreed to persist.
  bool can_continue() const {
    return keep_alive_ && !gone_ && (phase_ == Phase::kSent || phase_ == Phase::kStreamEnded);
  }

 private:
  std::string_view ConnectionField() const {
    if (!keep_alive_) return "close";
    return http10_ ? "keep-alive" : "";
  }

  bool Transmit(StringViews parts) {
    if (gone_) return false;
    if (!SendAll(fd_, parts, stall_timeout_ms_)) gone_ = true;
    return !gone_;
  }

  const int fd_;
  const bool client_keep_alive_;
  const bool http10_;
  const int stall_timeout_ms_;
  const std::atomic<bool>& stopping_;
  Phase phase_ = Phase::kNothingSent;
  bool keep_alive_ = false;  // decided when the head is written
  bool gone_ = false;        // a write failed or the peer closed
};

class HttpConnection {
 public:
  HttpConnection(UniqueFd fd, const HttpConnectionContext& context)
      : fd_(std::move(fd)),
        context_(context),
        parser_({.max_header_bytes = context.options->max_header_bytes,
                 .max_body_bytes = context.options->max_body_bytes}),
        read_buffer_(std::make_unique<char[]>(kReadChunkBytes)) {}

  void Serve() {
    for (bool first_request = true;; first_request = false) {
      switch (ReadRequest(first_request)) {
        case ReadOutcome::kRequest:
          if (!RunHandler()) {
            LingeringClose();
            return;
          }
          break;
        case ReadOutcome::kParseError:
          SendErrorAndClose(parser_.error().status, parser_.error().message);
          return;
        case ReadOutcome::kTimedOut:
          SendErrorAndClose(408, "timed out waiting for the rest of the request");
          return;
        case ReadOutcome::kClosed:
          return;
      }
    }
  }

 private:
  enum class ReadOutcome {
    kRequest,     // parser_ holds a whole request
    kParseError,  // parser_.error() says what to answer
    kTimedOut,    // the client stalled mid-request
    kClosed,      // close without answering: the client left, idled out, or the server stops
  };

  ReadOutcome ReadRequest(bool first_request) {
    const HttpServerOptions& options = *context_.options;
    parser_.Reset();
    bool continue_sent = false;
    for (;;) {
      if (!pending_.empty()) pending_.erase(0, parser_.Feed(pending_));
      if (parser_.state() == HttpRequestParser::State::kDone) return ReadOutcome::kRequest;
      if (parser_.state() == HttpRequestParser::State::kError) return ReadOutcome::kParseError;
      MLA_CHECK(pending_.empty());  // an unfinished request consumes everything it is fed
      if (parser_.expects_continue() && !continue_sent) {
        const std::string_view parts[] = {"HTTP/1.1 100 Continue\r\n\r\n"};
        if (!SendAll(fd_.get(), parts, options.read_timeout_ms)) return ReadOutcome::kClosed;
        continue_sent = true;
      }
      const bool idle = !parser_.started();
      const int timeout_ms =
          idle && !first_request ? options.keep_alive_timeout_ms : options.read_timeout_ms;
      switch (WaitReadable(fd_.get(), context_.stop_fd, timeout_ms)) {
        case WaitResult::kReady:
          break;
        case WaitResult::kTimeout:
          return idle ? ReadOutcome::kClosed : ReadOutcome::kTimedOut;
        case WaitResult::kWoken:  // the server is stopping; a partial request is dropped
        case WaitResult::kError:
          return ReadOutcome::kClosed;
      }
      ssize_t received = ::recv(fd_.get(), read_buffer_.get(), kReadChunkBytes, 0);
      if (received == 0) return ReadOutcome::kClosed;
      if (received < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return ReadOutcome::kClosed;
      }
      pending_.assign(read_buffer_.get(), static_cast<size_t>(received));
    }
  }

  // Runs the handler on the request in parser_; true when the connection may continue.
  bool RunHandler() {
    const HttpRequest request = parser_.TakeRequest();
    ConnectionResponseWriter writer(fd_.get(), parser_.keep_alive(),
                                    parser_.http_minor_version() == 0,
                                    context_.options->read_timeout_ms, *context_.stopping);
    bool threw = false;
    try {
      (*context_.handler)(request, writer);
    } catch (const std::exception& error) {
      threw = true;
      std::fprintf(stderr, "mlaserve: http handler for %s %s threw: %s\n", request.method.c_str(),
                   request.path.c_str(), error.what());
    } catch (...) {
      threw = true;
      std::fprintf(stderr, "mlaserve: http handler for %s %s threw\n", request.method.c_str(),
                   request.path.c_str());
    }
    switch (writer.phase()) {
      case ConnectionResponseWriter::Phase::kNothingSent: {
        std::string_view message =
            threw ? "internal error while handling the request" : "the handler sent no response";
        writer.Send(500, "application/json", JsonError(500, message, JsonErrorType(500)), {});
        break;
      }
      case ConnectionResponseWriter::Phase::kStreaming:
        if (threw) return false;  // no final chunk: the client sees a truncated response
        writer.EndStream();
        break;
      case ConnectionResponseWriter::Phase::kSent:
      case ConnectionResponseWriter::Phase::kStreamEnded:
        break;
    }
    return !threw && writer.can_continue();
  }

  void SendErrorAndClose(int status, std::string_view message) {
    const std::string body = JsonError(status, message, JsonErrorType(status));
    const std::string head = FormatResponseHead({.status = status,
                                                 .content_type = "application/json",
                                                 .content_length_bytes = body.size(),
                                                 .connection = "close"});
    const std::string_view parts[] = {head, body};
    if (SendAll(fd_.get(), parts, context_.options->read_timeout_ms)) LingeringClose();
  }

  // Half-closes, then drops what the client still sends until it closes too, kLingerMs pass,
  // kLingerMaxBytes arrive, or the server stops.
  void LingeringClose() {
    ::shutdown(fd_.get(), SHUT_WR);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLingerMs);
    size_t drained_bytes = 0;
    while (drained_bytes < kLingerMaxBytes) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      if (WaitReadable(fd_.get(), context_.stop_fd, static_cast<int>(left.count())) !=
          WaitResult::kReady) {
        return;
      }
      ssize_t received = ::recv(fd_.get(), read_buffer_.get(), kReadChunkBytes, 0);
      if (received == 0) return;
      if (received < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return;
      }
      drained_bytes += static_cast<size_t>(received);
    }
  }

  UniqueFd fd_;
  const HttpConnectionContext& context_;
  HttpRequestParser parser_;
  std::string pending_;                 // received, not yet parsed: at most one read's worth
  std::unique_ptr<char[]> read_buffer_;  // [kReadChunkBytes]
};

}  // namespace

void ServeHttpConnection(UniqueFd fd, const HttpConnectionContext& context) noexcept {
  try {
    HttpConnection connection(std::move(fd), context);
    connection.Serve();
  } catch (const std::exception& error) {
    // Allocation failure (a body at the limit on a starved machine): drop this connection only.
    std::fprintf(stderr, "mlaserve: http connection dropped: %s\n", error.what());
  } catch (...) {
    std::fprintf(stderr, "mlaserve: http connection dropped\n");
  }
}

}  // namespace mlaserve
