// Answering one request on a handler thread: the HttpResponseWriter that frames the handler's
// response on the socket, and what happens when the handler misbehaves; see http_connection.h.
#include "server/http_connection.h"

#include <cstdio>
#include <exception>
#include <span>
#include <string>

#include "core/log.h"
#include "server/http_response.h"

namespace mlaserve {
namespace {

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

// Runs the handler on the request in connection.parser; true when the connection may continue.
bool RunHandler(HttpConnection& connection, const HttpAnswerContext& context) {
  HttpRequestParser& parser = connection.parser;
  const HttpRequest request = parser.TakeRequest();
  ConnectionResponseWriter writer(connection.fd.get(),
                                  parser.keep_alive() && !connection.close_after,
                                  parser.http_minor_version() == 0,
                                  context.options->read_timeout_ms, *context.stopping);
  bool threw = false;
  try {
    (*context.handler)(request, writer);
  } catch (const std::exception& error) {
    threw = true;
    Log(LogLevel::kError, "mlaserve: http handler for %s %s threw: %s", request.method.c_str(),
        request.path.c_str(), error.what());
  } catch (...) {
    threw = true;
    Log(LogLevel::kError, "mlaserve: http handler for %s %s threw", request.method.c_str(),
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

}  // namespace

bool AnswerRequest(HttpConnection& connection, const HttpAnswerContext& context) noexcept {
  try {
    return RunHandler(connection, context);
  } catch (const std::exception& error) {
    // Allocation failure (a response at the limit on a starved machine): drop this connection.
    Log(LogLevel::kWarning, "mlaserve: http connection dropped: %s", error.what());
  } catch (...) {
    Log(LogLevel::kWarning, "mlaserve: http connection dropped");
  }
  return false;
}

}  // namespace mlaserve
