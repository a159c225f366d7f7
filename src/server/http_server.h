// The HTTP/1.x server the OpenAI / SGLang APIs sit on: POSIX sockets, one thread per connection
// (capped), keep-alive, pipelining, chunked request bodies, 100-continue, and streamed
// (chunked) responses for SSE. It knows nothing about the APIs: every request goes to one
// HttpHandler.
//
// Threads: Start() spawns an accept thread; each accepted connection gets its own thread, which
// reads its requests and calls the handler for each, in order. So the handler runs concurrently
// on different connections, never concurrently for one connection.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/http_request.h"
#include "server/http_response.h"  // JsonError
#include "server/socket_io.h"

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

// Called on a connection thread for each request. It may block (e.g. until generation ends);
// exceptions it throws are caught: 500 if nothing was sent yet, else the connection is closed
// (mid-stream: without the final chunk, so the client sees a truncated response).
using HttpHandler = std::function<void(const HttpRequest&, HttpResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;                     // 0: pick an ephemeral port (tests)
  int max_connections = 256;            // beyond: answer 503 with a JSON error and close
  size_t max_header_bytes = 64 << 10;   // beyond: 431
  size_t max_body_bytes = 16 << 20;     // beyond: 413 (checked from Content-Length before reading)
  // A client that goes this long without sending a byte mid-request gets 408 and is closed; a
  // new connection that sends nothing is closed after it. A client that takes no response
  // bytes for this long is treated as gone (Write() returns false).
  int read_timeout_ms = 30000;
  int keep_alive_timeout_ms = 60000;    // idle keep-alive connections are closed after this
};

class HttpServer {
 public:
  // Binds and listens (error Status: "cannot listen on HOST:PORT: <strerror>"), then serves on
  // its own threads until Stop(). The handler is called concurrently from connection threads.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                   HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }  // the bound port (useful with port 0)

  // Stops accepting new connections and closes the listening socket (new connects are
  // refused); connections already open keep being served (graceful drain, step 1).
  void StopAccepting();
  // Stops accepting, closes idle connections (and ones mid-way through receiving a request),
  // waits for in-flight handlers to return (they see ClientGone()/Write fail only if their
  // clients leave; their responses carry "Connection: close"), then joins every thread.
  // Idempotent; thread-safe; must not be called from a handler (it would wait for itself).
  void Stop();

  // Connections being served right now (each holds one thread).
  int active_connections() const { return active_connections_.load(std::memory_order_relaxed); }

 private:
  struct Connection;  // one connection thread; defined in http_server.cc

  HttpServer(const HttpServerOptions& options, HttpHandler handler, UniqueFd listen_fd,
             UniqueFd accept_wake_fd, UniqueFd stop_fd);
  void AcceptLoop();
  // Starts a connection thread for `fd`; false (fd untouched) when at the cap or out of threads.
  bool Admit(int fd);
  void ReapFinishedConnections();

  const HttpServerOptions options_;
  const HttpHandler handler_;
  const int port_;
  UniqueFd listen_fd_;       // closed by StopAccepting()
  UniqueFd accept_wake_fd_;  // readable once StopAccepting() began: the accept thread exits
  UniqueFd stop_fd_;         // readable once Stop() began: every connection thread polls it
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_connections_{0};

  std::thread accept_thread_;
  // Owned by the accept thread while it runs; by Stop() once it has been joined.
  std::vector<std::unique_ptr<Connection>> connections_;

  std::mutex lifecycle_mutex_;  // serializes StopAccepting() and Stop()
  bool accepting_stopped_ = false;
  bool stopped_ = false;
};

}  // namespace mlaserve
