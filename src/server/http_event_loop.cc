// The event loop that owns connections between requests; see http_event_loop.h.
#include "server/http_event_loop.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <system_error>

#include "core/check.h"
#include "core/log.h"
#include "server/http_response.h"

namespace mlaserve {
namespace {

constexpr int kMaxEventsPerWait = 256;
// Connections accepted per wake-up, so a flood of connects cannot starve the others.
constexpr int kMaxAcceptsPerWake = 64;
// Pause after accept() fails for lack of fds or memory (the pending connection would otherwise
// wake epoll in a busy loop).
constexpr int kAcceptBackoffMs = 100;
constexpr size_t kReadBufferBytes = 64 << 10;
// A lingering close ends once this much has been dropped, whatever the deadline.
constexpr size_t kLingerMaxBytes = 1 << 20;

constexpr std::string_view kContinueResponse = "HTTP/1.1 100 Continue\r\n\r\n";

// Sends `response` if the socket takes it all now; never waits on a client.
bool SendNow(int fd, std::string_view response) {
  const std::string_view parts[] = {response};
  return SendAll(fd, parts, /*stall_timeout_ms=*/0);
}

std::string ServiceUnavailable(std::string_view message) {
  return ErrorResponse(503, message, {{"Retry-After", "1"}});
}

}  // namespace

Result<std::unique_ptr<HttpEventLoop>> HttpEventLoop::Create(const HttpServerOptions& options,
                                                             int max_connections,
                                                             UniqueFd listen_fd,
                                                             HttpHandlerThreads& handler_threads) {
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) {
    return Status::Error(std::string("cannot create an epoll set: ") + std::strerror(errno));
  }
  Result<UniqueFd> doorbell_fd = MakeWakeFd();
  if (!doorbell_fd.ok()) return doorbell_fd.status();
  for (int fd : {listen_fd.get(), doorbell_fd->get()}) {
    epoll_event event = {.events = EPOLLIN, .data = {.fd = fd}};
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return Status::Error(std::string("cannot watch the listening socket: ") +
                           std::strerror(errno));
    }
  }
  return std::unique_ptr<HttpEventLoop>(
      new HttpEventLoop(options, max_connections, std::move(listen_fd), std::move(epoll_fd),
                        std::move(doorbell_fd).value(), handler_threads));
}

HttpEventLoop::HttpEventLoop(const HttpServerOptions& options, int max_connections,
                             UniqueFd listen_fd, UniqueFd epoll_fd, UniqueFd doorbell_fd,
                             HttpHandlerThreads& handler_threads)
    : options_(options),
      max_connections_(max_connections),
      too_many_connections_(ServiceUnavailable("too many connections; retry later")),
      out_of_threads_(ServiceUnavailable("the server cannot start a thread; retry later")),
      handler_threads_(handler_threads),
      listen_fd_(std::move(listen_fd)),
      epoll_fd_(std::move(epoll_fd)),
      doorbell_fd_(std::move(doorbell_fd)),
      read_buffer_(std::make_unique<char[]>(kReadBufferBytes)) {}

HttpEventLoop::~HttpEventLoop() {
  StopAccepting();
  Stop();
}

Status HttpEventLoop::Start() {
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& error) {
    return Status::Error(std::string("cannot start the HTTP event loop thread: ") + error.what());
  }
  return Status::Ok();
}

void HttpEventLoop::HandBack(std::unique_ptr<HttpConnection> connection, bool keep_open) noexcept {
  connection->keep_open = keep_open;
  {
    std::lock_guard<std::mutex> lock(handed_back_mutex_);
    connection->next_handed_back = std::move(handed_back_);
    handed_back_ = std::move(connection);
  }
  SignalWakeFd(doorbell_fd_.get());
}

void HttpEventLoop::StopAccepting() {
  std::unique_lock<std::mutex> lock(control_mutex_);
  if (!thread_.joinable()) {  // never started, or already stopped
    listen_fd_.Reset();
    return;
  }
  stop_accepting_requested_ = true;
  SignalWakeFd(doorbell_fd_.get());
  listening_closed_cv_.wait(lock, [this] { return listening_closed_; });
}

void HttpEventLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (!thread_.joinable()) return;
    stop_requested_ = true;
  }
  SignalWakeFd(doorbell_fd_.get());
  thread_.join();
}

void HttpEventLoop::Run() {
  epoll_event events[kMaxEventsPerWait];
  for (;;) {
    int num_events = ::epoll_wait(epoll_fd_.get(), events, kMaxEventsPerWait,
                                  NextTimeoutMs(Clock::now()));
    if (num_events < 0) num_events = 0;  // EINTR; nothing else can fail with these fds
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < num_events; ++i) {
      const int fd = events[i].data.fd;
      if (fd == doorbell_fd_.get()) {
        // Reset before looking at what the signallers left, so no signal is lost.
        ResetWakeFd(fd);
      } else if (fd == listen_fd_.get()) {
        AcceptPending(now);
      } else {
        OnReadable(fd, now);
      }
    }
    TakeHandedBack(now);
    ApplyControl();
    ExpireDeadlines(now);
    ResumeAcceptingWhenDue(now);
    if (stopping_ && entries_.empty()) return;
  }
}

int HttpEventLoop::NextTimeoutMs(Clock::time_point now) const {
  std::optional<Clock::time_point> earliest = accept_resume_at_;
  if (!deadlines_.empty() && (!earliest || deadlines_.begin()->first < *earliest)) {
    earliest = deadlines_.begin()->first;
  }
  if (!earliest) return -1;
  // Rounded up: waking a little early would only spin until the deadline.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*earliest - now);
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT32_MAX));
}

void HttpEventLoop::ApplyControl() {
  bool stop_accepting = false;
  bool stop = false;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    stop_accepting = stop_accepting_requested_ && !listening_closed_;
    stop = stop_requested_ && !stopping_;
  }
  if (stop_accepting || stop) CloseListeningSocket();
  if (!stop) return;
  stopping_ = true;
  // Everything not with a handler thread closes now; those come back through TakeHandedBack.
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.phase != Phase::kAnswering) Close(it->first);
    it = next;
  }
}

void HttpEventLoop::CloseListeningSocket() {
  listen_fd_.Reset();  // also leaves the epoll set
  accept_resume_at_.reset();
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    listening_closed_ = true;
  }
  listening_closed_cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Reading requests

void HttpEventLoop::ResumeAcceptingWhenDue(Clock::time_point now) {
  if (!accept_resume_at_ || now < *accept_resume_at_ || !listen_fd_.valid()) return;
  epoll_event event = {.events = EPOLLIN, .data = {.fd = listen_fd_.get()}};
  const bool watched = ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &event) == 0;
  accept_resume_at_.reset();
  if (!watched) accept_resume_at_ = now + std::chrono::milliseconds(kAcceptBackoffMs);
}

void HttpEventLoop::AcceptPending(Clock::time_point now) {
  for (int accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
        accept_resume_at_ = now + std::chrono::milliseconds(kAcceptBackoffMs);
      }
      return;  // EAGAIN: drained; ECONNABORTED and the like: try again on the next wake-up
    }
    UniqueFd socket(fd);
    SetNoDelay(fd);
    try {
      Admit(std::move(socket), now);
    } catch (const std::exception& error) {
      DropAfterError(fd, error);
    }
  }
}

void HttpEventLoop::Admit(UniqueFd socket, Clock::time_point now) {
  const int fd = socket.get();
  bool over_cap = false;
  if (open_connections_.load(std::memory_order_relaxed) >= max_connections_) {
    if (over_cap_connections_ >= kMaxOverCapConnections) {
      if (SendNow(fd, too_many_connections_)) ::shutdown(fd, SHUT_WR);
      return;  // closed: no room even to linger
    }
    over_cap = true;
  }
  auto connection = std::make_unique<HttpConnection>(
      std::move(socket), HttpParseLimits{.max_header_bytes = options_.max_header_bytes,
                                         .max_body_bytes = options_.max_body_bytes});
  Entry& entry = entries_[fd];
  entry = Entry{.connection = std::move(connection), .over_cap = over_cap};
  if (over_cap) {
    ++over_cap_connections_;
  } else {
    open_connections_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!Watch(fd, entry, true)) {
    Close(fd);
    return;
  }
  SetDeadline(fd, entry, now + std::chrono::milliseconds(IdleTimeoutMs(entry)));
}

void HttpEventLoop::OnReadable(int fd, Clock::time_point now) {
  auto it = entries_.find(fd);
  if (it == entries_.end() || !it->second.watched) return;  // closed earlier in this batch
  Entry& entry = it->second;
  const ssize_t received = ::recv(fd, read_buffer_.get(), kReadBufferBytes, 0);
  if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (entry.phase == Phase::kLingering) {
    if (received <= 0) {
      Close(fd);
    } else if ((entry.drained_bytes += static_cast<size_t>(received)) >= kLingerMaxBytes) {
      Close(fd);
    }
    return;
  }
  if (received <= 0) {  // the client left (mid-request: there is nobody to answer)
    Close(fd);
    return;
  }
  try {
    entry.connection->unparsed.append(read_buffer_.get(), static_cast<size_t>(received));
    Advance(fd, entry, now);
  } catch (const std::exception& error) {
    DropAfterError(fd, error);
  }
}

void HttpEventLoop::Advance(int fd, Entry& entry, Clock::time_point now) {
  HttpConnection& connection = *entry.connection;
  HttpRequestParser& parser = connection.parser;
  if (!connection.unparsed.empty()) connection.unparsed.erase(0, parser.Feed(connection.unparsed));
  switch (parser.state()) {
    case HttpRequestParser::State::kError:
      Reject(fd, entry, ErrorResponse(parser.error().status, parser.error().message), now);
      return;
    case HttpRequestParser::State::kDone:
      Dispatch(fd, entry, now);
      return;
    case HttpRequestParser::State::kBody:
      MLA_CHECK(connection.unparsed.empty());  // an unfinished request consumes all it is fed
      if (parser.expects_continue() && !entry.continue_sent) {
        if (!SendNow(fd, kContinueResponse)) {
          Close(fd);
          return;
        }
        entry.continue_sent = true;
      }
      entry.phase = Phase::kBody;
      SetDeadline(fd, entry, now + std::chrono::milliseconds(options_.read_timeout_ms));
      return;
    case HttpRequestParser::State::kHead: {
      MLA_CHECK(connection.unparsed.empty());
      if (!parser.started()) return;  // blank lines only: still idle
      if (entry.phase == Phase::kIdle) {
        entry.phase = Phase::kHead;
        entry.head_started = now;
      }
      // The head deadline does not move; a stall can end the request sooner.
      const auto head_deadline = entry.head_started + std::chrono::milliseconds(HeadTimeoutMs(entry));
      const auto stall_deadline = now + std::chrono::milliseconds(options_.read_timeout_ms);
      SetDeadline(fd, entry, std::min(head_deadline, stall_deadline));
      return;
    }
  }
}

void HttpEventLoop::Dispatch(int fd, Entry& entry, Clock::time_point now) {
  const bool probe = IsProbePath(entry.connection->parser.request().path);
  if (entry.over_cap && !probe) {
    Reject(fd, entry, too_many_connections_, now);
    return;
  }
  entry.connection->close_after = entry.over_cap;
  // The handler thread owns the socket until it hands the connection back.
  const bool unwatched = Watch(fd, entry, false);
  MLA_CHECK(unwatched);  // removing a watched fd cannot fail
  SetDeadline(fd, entry, std::nullopt);
  entry.phase = Phase::kAnswering;
  if (!handler_threads_.Submit(entry.connection, probe)) {
    entry.phase = Phase::kIdle;  // anything but kAnswering, so it can be closed
    Reject(fd, entry, out_of_threads_, now);
  }
}

void HttpEventLoop::TakeHandedBack(Clock::time_point now) {
  std::unique_ptr<HttpConnection> handed_back;
  {
    std::lock_guard<std::mutex> lock(handed_back_mutex_);
    handed_back = std::move(handed_back_);
  }
  while (handed_back) {
    std::unique_ptr<HttpConnection> connection = std::move(handed_back);
    handed_back = std::move(connection->next_handed_back);
    const int fd = connection->fd.get();
    try {
      Resume(std::move(connection), now);
    } catch (const std::exception& error) {
      DropAfterError(fd, error);
    }
  }
}

void HttpEventLoop::Resume(std::unique_ptr<HttpConnection> connection, Clock::time_point now) {
  const int fd = connection->fd.get();
  auto it = entries_.find(fd);
  MLA_CHECK(it != entries_.end() && it->second.phase == Phase::kAnswering);
  Entry& entry = it->second;
  entry.connection = std::move(connection);
  entry.phase = Phase::kIdle;
  if (stopping_) {
    Close(fd);
    return;
  }
  if (!entry.connection->keep_open) {
    StartLingering(fd, entry, now);
    return;
  }
  entry.continue_sent = false;
  entry.connection->parser.Reset();
  if (!Watch(fd, entry, true)) {
    Close(fd);
    return;
  }
  SetDeadline(fd, entry, now + std::chrono::milliseconds(IdleTimeoutMs(entry)));
  Advance(fd, entry, now);  // a pipelined request may be here already
}

void HttpEventLoop::ExpireDeadlines(Clock::time_point now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const int fd = deadlines_.begin()->second;
    Entry& entry = entries_.at(fd);
    SetDeadline(fd, entry, std::nullopt);
    switch (entry.phase) {
      case Phase::kHead:
      case Phase::kBody:
        try {
          Reject(fd, entry, ErrorResponse(408, "timed out waiting for the rest of the request"),
                 now);
        } catch (const std::exception&) {
          Close(fd);
        }
        break;
      case Phase::kIdle:       // nothing was asked: close quietly
      case Phase::kLingering:
      case Phase::kAnswering:  // (never has a deadline)
        Close(fd);
        break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Closing

void HttpEventLoop::Reject(int fd, Entry& entry, std::string_view response,
                           Clock::time_point now) {
  if (!SendNow(fd, response)) {
    Close(fd);
    return;
  }
  StartLingering(fd, entry, now);
}

void HttpEventLoop::StartLingering(int fd, Entry& entry, Clock::time_point now) {
  if (stopping_) {
    Close(fd);
    return;
  }
  ::shutdown(fd, SHUT_WR);
  entry.phase = Phase::kLingering;
  entry.drained_bytes = 0;
  if (!Watch(fd, entry, true)) {
    Close(fd);
    return;
  }
  SetDeadline(fd, entry, now + std::chrono::milliseconds(kLingerMs));
}

void HttpEventLoop::DropAfterError(int fd, const std::exception& error) {
  Log(LogLevel::kWarning, "mlaserve: http connection dropped: %s", error.what());
  if (entries_.contains(fd) && entries_.at(fd).phase != Phase::kAnswering) Close(fd);
}

void HttpEventLoop::Close(int fd) {
  auto it = entries_.find(fd);
  MLA_CHECK(it != entries_.end() && it->second.phase != Phase::kAnswering);
  if (it->second.deadline) deadlines_.erase({*it->second.deadline, fd});
  if (it->second.over_cap) {
    --over_cap_connections_;
  } else {
    open_connections_.fetch_sub(1, std::memory_order_relaxed);
  }
  entries_.erase(it);  // closes the fd, which also leaves the epoll set
}

bool HttpEventLoop::Watch(int fd, Entry& entry, bool on) {
  if (entry.watched == on) return true;
  epoll_event event = {.events = EPOLLIN, .data = {.fd = fd}};
  if (::epoll_ctl(epoll_fd_.get(), on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &event) != 0) {
    return false;
  }
  entry.watched = on;
  return true;
}

void HttpEventLoop::SetDeadline(int fd, Entry& entry, std::optional<Clock::time_point> deadline) {
  if (entry.deadline) deadlines_.erase({*entry.deadline, fd});
  entry.deadline.reset();
  if (!deadline) return;
  deadlines_.emplace(*deadline, fd);
  entry.deadline = deadline;
}

int HttpEventLoop::IdleTimeoutMs(const Entry& entry) const {
  return entry.over_cap ? std::min(options_.keep_alive_timeout_ms, kOverCapTimeoutMs)
                        : options_.keep_alive_timeout_ms;
}

int HttpEventLoop::HeadTimeoutMs(const Entry& entry) const {
  return entry.over_cap ? std::min(options_.head_timeout_ms, kOverCapTimeoutMs)
                        : options_.head_timeout_ms;
}

bool HttpEventLoop::IsProbePath(const std::string& path) const {
  return std::find(options_.probe_paths.begin(), options_.probe_paths.end(), path) !=
         options_.probe_paths.end();
}

}  // namespace mlaserve
