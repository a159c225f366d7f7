// POSIX socket helpers; see socket_io.h.
#include "server/socket_io.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace mlaserve {
namespace {

using SteadyClock = std::chrono::steady_clock;

// poll() that restarts after EINTR with what is left of timeout_ms (< 0: forever).
int PollWithDeadline(pollfd* fds, nfds_t num_fds, int timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  int wait_ms = timeout_ms;
  for (;;) {
    int rc = ::poll(fds, num_fds, wait_ms);
    if (rc >= 0 || errno != EINTR) return rc;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      wait_ms = left.count() > 0 ? static_cast<int>(left.count()) : 0;
    }
  }
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset() {
  // close() is not retried on EINTR: on Linux the fd is released either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool SendAll(int fd, std::span<const std::string_view> parts, int stall_timeout_ms) {
  constexpr size_t kMaxParts = 8;
  if (parts.size() > kMaxParts) return false;
  iovec iov[kMaxParts];
  size_t num_iov = 0;
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    iov[num_iov++] = {.iov_base = const_cast<char*>(part.data()), .iov_len = part.size()};
  }
  size_t first = 0;  // iov[first..num_iov) is still to send
  while (first < num_iov) {
    msghdr message{};
    message.msg_iov = iov + first;
    message.msg_iovlen = num_iov - first;
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      pollfd out = {.fd = fd, .events = POLLOUT, .revents = 0};
      int rc = PollWithDeadline(&out, 1, stall_timeout_ms);
      if (rc <= 0) return false;  // timeout or poll error
      if ((out.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0 && (out.revents & POLLOUT) == 0) {
        return false;
      }
      continue;
    }
    auto left = static_cast<size_t>(sent);
    while (first < num_iov && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

bool PeerClosed(int fd) {
  pollfd fds = {.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  int rc = ::poll(&fds, 1, 0);
  if (rc < 0) return errno != EINTR;
  return (fds.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

Result<UniqueFd> MakeWakeFd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) {
    return Status::Error(std::string("cannot create an eventfd: ") + std::strerror(errno));
  }
  return UniqueFd(fd);
}

void SignalWakeFd(int wake_fd) {
  const uint64_t one = 1;
  // Nobody reads the counter, so it stays readable; a failed write (counter full) cannot happen
  // after fewer than 2^64-1 signals.
  ssize_t rc = ::write(wake_fd, &one, sizeof(one));
  (void)rc;
}

void ResetWakeFd(int wake_fd) {
  uint64_t count = 0;
  // Non-blocking: fails with EAGAIN when nothing was signalled, which is fine.
  ssize_t rc = ::read(wake_fd, &count, sizeof(count));
  (void)rc;
}

Result<UniqueFd> ListenTcp(const std::string& host, int port) {
  const std::string where = "cannot listen on " + host + ":" + std::to_string(port) + ": ";
  if (port < 0 || port > 65535) return Status::Error(where + "port out of range");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port);
  int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                          &addresses);
  if (gai != 0) return Status::Error(where + ::gai_strerror(gai));

  int last_errno = EADDRNOTAVAIL;
  UniqueFd bound;
  for (addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
    UniqueFd fd(::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         address->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    const int on = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(fd.get(), address->ai_addr, address->ai_addrlen) != 0 ||
        ::listen(fd.get(), SOMAXCONN) != 0) {
      last_errno = errno;
      continue;
    }
    bound = std::move(fd);
    break;
  }
  ::freeaddrinfo(addresses);
  if (!bound.valid()) return Status::Error(where + std::strerror(last_errno));
  return bound;
}

int LocalPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return -1;
}

void SetNoDelay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

}  // namespace mlaserve
