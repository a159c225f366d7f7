// Lifecycle of the HTTP server: the open-file limit, the listening socket, wiring the event loop
// to the handler threads, and the two-step stop.
#include "server/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "core/log.h"
#include "server/http_connection.h"
#include "server/http_event_loop.h"
#include "server/http_handler_threads.h"
#include "server/socket_io.h"

namespace mlaserve {
namespace {

// File descriptors the process needs besides its client sockets: the listening socket, epoll,
// eventfds, and whatever else it has open (model files, logs).
constexpr int kSpareFds = 64;

// The connection cap the open-file limit allows: raises the soft limit (up to the hard one) when
// max_connections would not fit, and lowers the cap, saying so, when even the hard limit is short.
int FitOpenFileLimit(int max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return max_connections;
  const rlim_t needed = static_cast<rlim_t>(max_connections) +
                        HttpEventLoop::kMaxOverCapConnections + kSpareFds;
  if (limit.rlim_cur >= needed) return max_connections;
  rlimit raised = limit;
  raised.rlim_cur = std::min(needed, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur >= needed) return max_connections;
  const int fitted = std::max<int>(
      1, static_cast<int>(limit.rlim_cur) - HttpEventLoop::kMaxOverCapConnections - kSpareFds);
  Log(LogLevel::kWarning,
      "mlaserve: http max_connections lowered from %d to %d: the open-file limit is %llu "
      "(raise it with ulimit -n)",
      max_connections, fitted, static_cast<unsigned long long>(limit.rlim_cur));
  return fitted;
}

Status CheckOptions(const HttpServerOptions& options) {
  if (options.max_connections < 1) return Status::Error("max_connections must be >= 1");
  if (options.max_handler_threads < 1) return Status::Error("max_handler_threads must be >= 1");
  if (options.probe_threads < 0) return Status::Error("probe_threads must be >= 0");
  if (options.head_timeout_ms <= 0 || options.read_timeout_ms <= 0 ||
      options.keep_alive_timeout_ms <= 0) {
    return Status::Error("HTTP timeouts must be > 0 ms");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  if (!handler) return Status::Error("HttpServer::Start: no handler");
  if (Status valid = CheckOptions(options); !valid.ok()) return valid;
  const int max_connections = FitOpenFileLimit(options.max_connections);
  Result<UniqueFd> listen_fd = ListenTcp(options.host, options.port);
  if (!listen_fd.ok()) return listen_fd.status();

  std::unique_ptr<HttpServer> server(new HttpServer(options, std::move(handler)));
  server->port_ = LocalPort(listen_fd->get());
  Result<std::unique_ptr<HttpEventLoop>> event_loop = HttpEventLoop::Create(
      options, max_connections, std::move(listen_fd).value(), *server->handler_threads_);
  if (!event_loop.ok()) return event_loop.status();
  server->event_loop_ = std::move(event_loop).value();
  if (Status started = server->event_loop_->Start(); !started.ok()) return started;
  return server;
}

HttpServer::HttpServer(const HttpServerOptions& options, HttpHandler handler)
    : options_(options),
      handler_(std::move(handler)),
      handler_threads_(std::make_unique<HttpHandlerThreads>(
          HandlerThreadLimits{.max_threads = options.max_handler_threads,
                              .probe_threads = options.probe_threads},
          [this](std::unique_ptr<HttpConnection> connection) {
            Answer(std::move(connection));
          })) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Answer(std::unique_ptr<HttpConnection> connection) {
  const HttpAnswerContext context = {
      .options = &options_, .handler = &handler_, .stopping = &stopping_};
  const bool keep_open = AnswerRequest(*connection, context);
  event_loop_->HandBack(std::move(connection), keep_open);
}

void HttpServer::StopAccepting() {
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (event_loop_) event_loop_->StopAccepting();
}

void HttpServer::Stop() {
  StopAccepting();
  // Held while joining, so a concurrent Stop() returns only once everything has stopped.
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_relaxed);
  // The loop returns once every connection is closed, so no handler thread is left running.
  if (event_loop_) event_loop_->Stop();
  handler_threads_->Stop();
}

int HttpServer::active_connections() const {
  return event_loop_ ? event_loop_->open_connections() : 0;
}

}  // namespace mlaserve
