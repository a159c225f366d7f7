// Lifecycle of the HTTP server: the listening socket, the accept thread, the connection threads
// and their reaping, the 503s beyond max_connections, and the two-step stop.
#include "server/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <span>
#include <system_error>

#include "server/http_connection.h"

namespace mlaserve {

struct HttpServer::Connection {
  std::thread thread;
  std::atomic<bool> finished{false};  // set last thing by the thread: join() will not block
};

namespace {

using Clock = std::chrono::steady_clock;

// How often the accept thread joins finished connection threads when nothing else wakes it.
constexpr int kReapIntervalMs = 500;
// Backoff after accept() fails for lack of fds or memory (the pending connection would
// otherwise wake poll() in a busy loop).
constexpr int kAcceptBackoffMs = 100;
// Connections accepted per poll() wake-up before checking for StopAccepting().
constexpr int kMaxAcceptsPerWake = 64;

// Connections turned away with a 503 while the server is at max_connections. The accept thread
// sends the (small) answer, half-closes, and keeps reading and dropping what the client sends
// until it closes or a deadline passes: closing with unread bytes would send a RST that can
// destroy the 503 before the client reads it. Accept thread only.
class RejectedSockets {
 public:
  static constexpr size_t kMaxSockets = 64;  // beyond: closed at once after the answer
  static constexpr int kLingerMs = 1000;

  void Add(UniqueFd fd, std::string_view response) {
    const std::string_view parts[] = {response};
    // The socket is fresh, so the answer fits its send buffer; never wait on a client here.
    if (!SendAll(fd.get(), parts, 0)) return;
    ::shutdown(fd.get(), SHUT_WR);
    if (sockets_.size() >= kMaxSockets) return;
    sockets_.push_back({std::move(fd), Clock::now() + std::chrono::milliseconds(kLingerMs)});
  }

  void AppendPollFds(std::vector<pollfd>& fds) const {
    for (const Socket& socket : sockets_) {
      fds.push_back({.fd = socket.fd.get(), .events = POLLIN, .revents = 0});
    }
  }

  // After poll(): `fds` are the entries AppendPollFds() added, in order.
  void Serve(std::span<const pollfd> fds) {
    char discard[4096];
    const auto now = Clock::now();
    for (size_t i = 0; i < sockets_.size() && i < fds.size(); ++i) {
      bool done = now >= sockets_[i].deadline;
      if (fds[i].revents != 0) {
        ssize_t received = ::recv(sockets_[i].fd.get(), discard, sizeof(discard), 0);
        if (received == 0 || (received < 0 && errno != EAGAIN && errno != EINTR)) done = true;
      }
      if (done) sockets_[i].fd.Reset();  // erased below, keeping indices aligned with fds
    }
    std::erase_if(sockets_, [](const Socket& socket) { return !socket.fd.valid(); });
  }

  // Milliseconds until the earliest deadline (>= 0), or -1 with nothing pending.
  int NextTimeoutMs() const {
    if (sockets_.empty()) return -1;
    auto earliest = sockets_.front().deadline;
    for (const Socket& socket : sockets_) earliest = std::min(earliest, socket.deadline);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(earliest - Clock::now());
    return static_cast<int>(std::max<int64_t>(left.count() + 1, 0));
  }

 private:
  struct Socket {
    UniqueFd fd;
    Clock::time_point deadline;
  };
  std::vector<Socket> sockets_;
};

std::string ServiceUnavailableResponse() {
  const std::string body =
      JsonError(503, "too many connections; retry later", JsonErrorType(503));
  const std::vector<std::pair<std::string, std::string>> retry_after = {{"Retry-After", "1"}};
  return FormatResponseHead({.status = 503,
                             .content_type = "application/json",
                             .content_length_bytes = body.size(),
                             .connection = "close",
                             .extra_headers = &retry_after}) +
         body;
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      HttpHandler handler) {
  if (!handler) return Status::Error("HttpServer::Start: no handler");
  Result<UniqueFd> listen_fd = ListenTcp(options.host, options.port);
  if (!listen_fd.ok()) return listen_fd.status();
  Result<UniqueFd> accept_wake_fd = MakeWakeFd();
  if (!accept_wake_fd.ok()) return accept_wake_fd.status();
  Result<UniqueFd> stop_fd = MakeWakeFd();
  if (!stop_fd.ok()) return stop_fd.status();

  std::unique_ptr<HttpServer> server(
      new HttpServer(options, std::move(handler), std::move(listen_fd).value(),
                     std::move(accept_wake_fd).value(), std::move(stop_fd).value()));
  try {
    server->accept_thread_ = std::thread([raw = server.get()] { raw->AcceptLoop(); });
  } catch (const std::system_error& error) {
    return Status::Error(std::string("cannot start the HTTP accept thread: ") + error.what());
  }
  return server;
}

HttpServer::HttpServer(const HttpServerOptions& options, HttpHandler handler, UniqueFd listen_fd,
                       UniqueFd accept_wake_fd, UniqueFd stop_fd)
    : options_(options),
      handler_(std::move(handler)),
      port_(LocalPort(listen_fd.get())),
      listen_fd_(std::move(listen_fd)),
      accept_wake_fd_(std::move(accept_wake_fd)),
      stop_fd_(std::move(stop_fd)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::StopAccepting() {
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (accepting_stopped_) return;
  accepting_stopped_ = true;
  SignalWakeFd(accept_wake_fd_.get());
  if (accept_thread_.joinable()) accept_thread_.join();
  listen_fd_.Reset();  // new connects are refused from here on
}

void HttpServer::Stop() {
  StopAccepting();
  // Held while joining, so a concurrent Stop() returns only once everything has stopped.
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true, std::memory_order_relaxed);
  SignalWakeFd(stop_fd_.get());
  for (std::unique_ptr<Connection>& connection : connections_) connection->thread.join();
  connections_.clear();
}

void HttpServer::AcceptLoop() {
  const std::string service_unavailable = ServiceUnavailableResponse();
  RejectedSockets rejected;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({.fd = listen_fd_.get(), .events = POLLIN, .revents = 0});
    fds.push_back({.fd = accept_wake_fd_.get(), .events = POLLIN, .revents = 0});
    rejected.AppendPollFds(fds);
    int timeout_ms = kReapIntervalMs;
    if (int rejected_ms = rejected.NextTimeoutMs(); rejected_ms >= 0) {
      timeout_ms = std::min(timeout_ms, rejected_ms);
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      // Cannot happen with valid fds; back off rather than spin.
      if (WaitReadable(accept_wake_fd_.get(), -1, kAcceptBackoffMs) != WaitResult::kTimeout) {
        return;
      }
      continue;
    }
    if (fds[1].revents != 0) return;  // StopAccepting()
    rejected.Serve(std::span<const pollfd>(fds).subspan(2));
    ReapFinishedConnections();
    if ((fds[0].revents & POLLIN) == 0) continue;

    for (int accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
      int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          if (WaitReadable(accept_wake_fd_.get(), -1, kAcceptBackoffMs) != WaitResult::kTimeout) {
            return;
          }
        }
        break;  // EAGAIN: drained; ECONNABORTED and the like: try again on the next wake-up
      }
      SetNoDelay(fd);
      if (!Admit(fd)) rejected.Add(UniqueFd(fd), service_unavailable);
    }
  }
}

bool HttpServer::Admit(int fd) {
  if (active_connections_.load(std::memory_order_relaxed) >= options_.max_connections) {
    return false;
  }
  try {
    connections_.reserve(connections_.size() + 1);  // nothing can throw once the thread runs
    auto connection = std::make_unique<Connection>();
    Connection* raw = connection.get();
    // Only this thread increments, so the check above cannot be raced past the cap.
    active_connections_.fetch_add(1, std::memory_order_relaxed);
    try {
      connection->thread = std::thread([this, raw, fd] {
        const HttpConnectionContext context = {.options = &options_,
                                               .handler = &handler_,
                                               .stop_fd = stop_fd_.get(),
                                               .stopping = &stopping_};
        ServeHttpConnection(UniqueFd(fd), context);
        active_connections_.fetch_sub(1, std::memory_order_relaxed);
        raw->finished.store(true, std::memory_order_release);
      });
    } catch (...) {
      active_connections_.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
    connections_.push_back(std::move(connection));
    return true;
  } catch (...) {
    return false;  // out of threads or memory: the client gets a 503 instead
  }
}

void HttpServer::ReapFinishedConnections() {
  std::erase_if(connections_, [](const std::unique_ptr<Connection>& connection) {
    if (!connection->finished.load(std::memory_order_acquire)) return false;
    connection->thread.join();
    return true;
  });
}

}  // namespace mlaserve
