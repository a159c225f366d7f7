// The HTTP server's event loop: one thread, one epoll set, owning the listening socket and every
// connection while it is not being answered. It accepts, reads request bytes (non-blocking)
// into each connection's parser, and enforces the deadlines; a connection whose request is
// complete goes to a handler thread (HttpHandlerThreads), which hands it back afterwards.
// So an idle or slow client costs a socket and a parser, never a thread.
//
// Deadlines (HttpServerOptions):
//   - no request byte yet (a fresh connection, or between keep-alive requests): closed quietly
//     after keep_alive_timeout_ms;
//   - a request head not complete head_timeout_ms after its first byte: 408, however steadily
//     it trickles in;
//   - a head or body with no byte for read_timeout_ms: 408.
// Errors in the request (400, 413, 417, 431, 501, 505) are answered here, as is "100 Continue".
//
// The socket cap: beyond max_connections a few more connections (kMaxOverCapConnections) are
// read with short deadlines; a probe request (HttpServerOptions::probe_paths) on one of them is
// answered on the probe reserve, anything else gets 503 (Retry-After: 1). Beyond those, a new
// connection gets the 503 at once. A response that ends a connection is followed by a lingering
// close here (half-close, then drop what the client still sends for up to kLingerMs), so the
// client reads it rather than a reset.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/status.h"
#include "server/http_connection.h"
#include "server/http_handler_threads.h"
#include "server/http_server.h"
#include "server/socket_io.h"

namespace mlaserve {

class HttpEventLoop {
 public:
  // Connections admitted beyond max_connections, only to answer probes or a 503 after reading
  // the request; their idle and head deadlines are at most kOverCapTimeoutMs.
  static constexpr int kMaxOverCapConnections = 64;
  static constexpr int kOverCapTimeoutMs = 1000;
  static constexpr int kLingerMs = 500;

  // `listen_fd`: a listening, non-blocking socket. max_connections: the cap actually used
  // (HttpServer may lower options.max_connections to fit the open-file limit). The loop hands
  // complete requests to `handler_threads`, which must outlive it.
  static Result<std::unique_ptr<HttpEventLoop>> Create(const HttpServerOptions& options,
                                                       int max_connections, UniqueFd listen_fd,
                                                       HttpHandlerThreads& handler_threads);
  ~HttpEventLoop();  // Stop()
  HttpEventLoop(const HttpEventLoop&) = delete;
  HttpEventLoop& operator=(const HttpEventLoop&) = delete;

  // Starts the loop's thread. Error Status when the system refuses a thread.
  Status Start();

  // From a handler thread, once it has answered: gives the connection back. keep_open: it may
  // carry another request (bytes of one may already be in connection->unparsed); else it gets a
  // lingering close. Thread-safe; never allocates or blocks on the loop.
  void HandBack(std::unique_ptr<HttpConnection> connection, bool keep_open) noexcept;

  // Closes the listening socket; returns once it is closed (new connects are refused).
  // Connections already open are served as before. Idempotent.
  void StopAccepting();
  // Closes every connection the loop holds (idle, mid-request, lingering), then waits until the
  // handler threads have handed back every connection they hold, closes those too, and joins
  // the loop's thread. Idempotent. StopAccepting() and Stop() must not run concurrently with
  // each other (HttpServer serializes them).
  void Stop();

  // Client connections open now (admitted ones, not those beyond the cap). Thread-safe.
  int open_connections() const { return open_connections_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;

  enum class Phase {
    kIdle,       // no byte of a request yet
    kHead,       // receiving a request head
    kBody,       // receiving a request body
    kAnswering,  // a handler thread holds the connection (and its fd); not watched
    kLingering,  // answered, half-closed: dropping what the client still sends
  };

  // The loop's record of one open connection; it exists from accept to close.
  struct Entry {
    std::unique_ptr<HttpConnection> connection;  // null while kAnswering
    Phase phase = Phase::kIdle;
    bool over_cap = false;       // admitted beyond max_connections
    bool watched = false;        // in the epoll set
    bool continue_sent = false;  // "100 Continue" went out for the current request
    Clock::time_point head_started;
    std::optional<Clock::time_point> deadline;  // mirrored in deadlines_
    size_t drained_bytes = 0;                   // kLingering: dropped so far
  };

  HttpEventLoop(const HttpServerOptions& options, int max_connections, UniqueFd listen_fd,
                UniqueFd epoll_fd, UniqueFd doorbell_fd, HttpHandlerThreads& handler_threads);

  void Run();
  int NextTimeoutMs(Clock::time_point now) const;
  void ApplyControl();  // StopAccepting() and Stop() requests
  void CloseListeningSocket();

  // After accept() ran out of fds, the listening socket leaves the epoll set for a moment.
  void ResumeAcceptingWhenDue(Clock::time_point now);
  void AcceptPending(Clock::time_point now);
  void Admit(UniqueFd socket, Clock::time_point now);
  void OnReadable(int fd, Clock::time_point now);
  // Feeds connection->unparsed to the parser and acts on its state.
  void Advance(int fd, Entry& entry, Clock::time_point now);
  void Dispatch(int fd, Entry& entry, Clock::time_point now);
  void TakeHandedBack(Clock::time_point now);
  void Resume(std::unique_ptr<HttpConnection> connection, Clock::time_point now);
  void ExpireDeadlines(Clock::time_point now);

  // Sends a small complete response without waiting (the client gets nothing if its socket
  // cannot take it now), then lingers.
  void Reject(int fd, Entry& entry, std::string_view response, Clock::time_point now);
  void StartLingering(int fd, Entry& entry, Clock::time_point now);
  void Close(int fd);
  // After an exception (allocation failure: a body at the limit on a starved machine) while
  // serving `fd`: logs it and drops that connection only, unless a handler thread has it.
  void DropAfterError(int fd, const std::exception& error);
  // Adds or removes the fd from the epoll set; false when adding fails (out of memory).
  [[nodiscard]] bool Watch(int fd, Entry& entry, bool on);
  void SetDeadline(int fd, Entry& entry, std::optional<Clock::time_point> deadline);

  int IdleTimeoutMs(const Entry& entry) const;
  int HeadTimeoutMs(const Entry& entry) const;
  bool IsProbePath(const std::string& path) const;

  const HttpServerOptions options_;
  const int max_connections_;
  const std::string too_many_connections_;  // a 503 response
  const std::string out_of_threads_;        // a 503 response
  HttpHandlerThreads& handler_threads_;

  UniqueFd listen_fd_;   // closed by StopAccepting()
  UniqueFd epoll_fd_;
  UniqueFd doorbell_fd_;  // signalled by HandBack(), StopAccepting(), Stop()
  std::thread thread_;

  // Loop thread only.
  std::unordered_map<int, Entry> entries_;  // by fd: every open connection
  std::set<std::pair<Clock::time_point, int>> deadlines_;  // (deadline, fd), earliest first
  std::optional<Clock::time_point> accept_resume_at_;   // accepting paused (out of fds)
  int over_cap_connections_ = 0;
  bool stopping_ = false;
  std::unique_ptr<char[]> read_buffer_;  // [kReadBufferBytes]

  std::atomic<int> open_connections_{0};

  std::mutex handed_back_mutex_;
  std::unique_ptr<HttpConnection> handed_back_;  // newest first, through next_handed_back

  std::mutex control_mutex_;
  std::condition_variable listening_closed_cv_;
  bool stop_accepting_requested_ = false;
  bool stop_requested_ = false;
  bool listening_closed_ = false;
};

}  // namespace mlaserve
