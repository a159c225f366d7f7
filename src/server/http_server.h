// The HTTP/1.x server the OpenAI / SGLang APIs sit on: POSIX sockets, keep-alive, pipelining,
// chunked request bodies, 100-continue, and streamed (chunked) responses for SSE. It knows
// nothing about the APIs: every request goes to one HttpHandler.
//
// Threads: one event-loop thread (http_event_loop.h) accepts connections and reads requests for
// all of them without blocking, with deadlines, so an idle or slow client holds a socket, never
// a thread. A complete request runs the handler on a handler thread (http_handler_threads.h):
// at most max_handler_threads at once, more wait in a queue, and probe_threads more serve only
// probe_paths so /health answers while every other thread is busy. After the response the
// connection goes back to the loop. So the handler runs concurrently on different connections,
// never concurrently for one connection, and requests on one connection are answered in order.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/http_request.h"
#include "server/http_response.h"  // JsonError

namespace mlaserve {

// How a handler answers. Used only on the thread that runs the handler, only during the call.
// Exactly one of: Send() once; or BeginStream(), any number of Write()s, EndStream(). Calls out
// of that order are ignored (Write() returns false). A handler that returns without answering
// gets a 500 JSON error; one that returns mid-stream has its stream ended as by EndStream().
// Errors the server generates itself are JSON in OpenAI's error shape (JsonError).
class HttpResponseWriter {
 public:
  virtual ~HttpResponseWriter() = default;
  // A complete response (Content-Length). Call once, and not after BeginStream.
  virtual void Send(int status, std::string_view content_type, std::string_view body,
                    const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) = 0;
  // A streamed response (Transfer-Encoding: chunked), e.g. text/event-stream for SSE. To an
  // HTTP/1.0 client the body is sent raw and ends when the server closes the connection.
  virtual void BeginStream(int status, std::string_view content_type) = 0;
  // Sends one chunk now (flushed). false once the client has gone (write error / peer closed);
  // the handler should then stop and clean up. Writing "" sends nothing.
  virtual bool Write(std::string_view data) = 0;
  virtual void EndStream() = 0;
  // Polls (non-blocking) whether the peer has closed the connection; for handlers that wait a
  // long time before sending anything (a non-streaming generation).
  virtual bool ClientGone() = 0;
};

struct HttpConnection;
class HttpEventLoop;
class HttpHandlerThreads;

// Called on a handler thread for each request. It may block (e.g. until generation ends);
// exceptions it throws are caught: 500 if nothing was sent yet, else the connection is closed
// (mid-stream: without the final chunk, so the client sees a truncated response).
using HttpHandler = std::function<void(const HttpRequest&, HttpResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;                     // 0: pick an ephemeral port (tests)
  // Open client sockets. Beyond, a probe request (probe_paths) is still answered on a few extra
  // sockets and anything else gets 503 with a JSON error. Start() raises the process's open-file
  // limit to fit, or lowers this (with a log line) when the hard limit is too low.
  int max_connections = 4096;
  size_t max_header_bytes = 64 << 10;   // beyond: 431
  size_t max_body_bytes = 16 << 20;     // beyond: 413 (checked from Content-Length before reading)
  // A request head (request line and headers) not complete this long after its first byte gets
  // 408 and the connection is closed, however steadily the bytes trickle in (slowloris).
  int head_timeout_ms = 10000;
  // A client that goes this long without sending a byte mid-request gets 408 and is closed. A
  // client that takes no response bytes for this long is treated as gone (Write() false).
  int read_timeout_ms = 30000;
  // A connection with no request in progress (fresh, or idle between keep-alive requests) is
  // closed after this (uvicorn's --timeout-keep-alive default).
  int keep_alive_timeout_ms = 5000;
  // Requests whose handlers run at once; more wait (in order) for one to finish, never refused.
  int max_handler_threads = 512;
  // Extra handler threads that only requests for probe_paths may use: a liveness probe or a
  // metrics scrape is answered even while max_handler_threads handlers wait on generations.
  // Their handlers should answer without blocking.
  int probe_threads = 4;
  std::vector<std::string> probe_paths = {"/health", "/metrics"};  // SGLang's probe and scrape
};

class HttpServer {
 public:
  // Binds and listens (error Status: "cannot listen on HOST:PORT: <strerror>"), then serves on
  // its own threads until Stop(). The handler is called concurrently from handler threads.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }  // the bound port (useful with port 0)

  // Stops accepting new connections and closes the listening socket (new connects are
  // refused once it returns); connections already open keep being served (graceful drain,
  // step 1).
  void StopAccepting();
  // Stops accepting, closes idle connections (and ones mid-way through receiving a request),
  // answers the requests already received (queued ones included) and waits for their handlers
  // to return (they see ClientGone()/Write fail only if their clients leave; their responses
  // carry "Connection: close"), then joins every thread. Idempotent; thread-safe; must not be
  // called from a handler (it would wait for itself).
  void Stop();

  // Client connections open now: idle, receiving a request, or being answered (at most
  // max_connections; the few beyond the cap that may only ask for a probe are not counted).
  int active_connections() const;

 private:
  HttpServer(const HttpServerOptions& options, HttpHandler handler);
  void Answer(std::unique_ptr<HttpConnection> connection);  // on a handler thread

  const HttpServerOptions options_;
  const HttpHandler handler_;
  int port_ = -1;
  std::atomic<bool> stopping_{false};  // responses say "Connection: close" once set
  std::unique_ptr<HttpHandlerThreads> handler_threads_;
  std::unique_ptr<HttpEventLoop> event_loop_;

  std::mutex lifecycle_mutex_;  // serializes StopAccepting() and Stop()
  bool stopped_ = false;
};

}  // namespace mlaserve
