// POSIX socket helpers for the HTTP server (Linux): an owning fd, whole writes (with a stall
// timeout) that never raise SIGPIPE, wake fds, and the listening socket. Every function is thread-safe in
// the sense that matters here: each fd is used by one thread at a time, except wake fds, which
// any thread may signal and poll.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mlaserve {

// Owns one file descriptor and closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();  // gives up ownership; returns the fd
  void Reset();   // closes the fd now (if any)

 private:
  int fd_ = -1;
};

// Sends every byte of `parts`, in order, on a non-blocking socket (MSG_NOSIGNAL: a closed peer is
// an error, not a signal). Waits up to stall_timeout_ms each time the peer stops taking data.
// false on an error, a timeout, or more than 8 parts.
[[nodiscard]] bool SendAll(int fd, std::span<const std::string_view> parts, int stall_timeout_ms);

// Non-blocking: true once the peer has closed its side or the connection has failed. Bytes the
// peer sent earlier and the server has not read yet do not hide the close (POLLRDHUP).
bool PeerClosed(int fd);

// An eventfd that stays readable once Signal()ed: a level-triggered broadcast to every poller.
Result<UniqueFd> MakeWakeFd();
void SignalWakeFd(int wake_fd);
// Makes a wake fd unreadable again until the next Signal: for a doorbell with one reader, which
// resets it before looking at what the signallers left for it (so no signal is lost).
void ResetWakeFd(int wake_fd);

// A non-blocking TCP socket bound to host:port (port 0: ephemeral) and listening, with
// SO_REUSEADDR. Error: "cannot listen on HOST:PORT: <reason>".
Result<UniqueFd> ListenTcp(const std::string& host, int port);

// The local port a socket is bound to, or -1.
int LocalPort(int fd);

// Sets TCP_NODELAY so every response part leaves at once (streamed chunks must not wait for
// Nagle). Best effort: non-TCP sockets are left as they are.
void SetNoDelay(int fd);

}  // namespace mlaserve
