#include "support/peer_has_read.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace mlaserve::testing {
namespace {

// Bytes waiting in the receive queue of the socket whose local end is `local` and remote end
// `remote` (as /proc/net/tcp prints them: hex address and port), or -1 when none is listed.
long ReceiveQueueBytes(const sockaddr_in& local, const sockaddr_in& remote) {
  auto key = [](const sockaddr_in& a) {
    char text[32];
    // /proc/net/tcp prints the address as the host-order value of the network-order word.
    std::snprintf(text, sizeof(text), "%08X:%04X", a.sin_addr.s_addr, unsigned(ntohs(a.sin_port)));
    return std::string(text);
  };
  const std::string want_local = key(local), want_remote = key(remote);
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    char sl[16], local_text[32], remote_text[32], state[8];
    unsigned long tx_queue = 0, rx_queue = 0;
    if (std::sscanf(line.c_str(), "%15s %31s %31s %7s %lx:%lx", sl, local_text, remote_text, state, &tx_queue,
                    &rx_queue) != 6) {
      continue;
    }
    if (want_local == local_text && want_remote == remote_text) return long(rx_queue);
  }
  return -1;
}

}  // namespace

bool PeerHasRead(int fd, std::chrono::milliseconds timeout) {
  sockaddr_in ours{}, theirs{};
  socklen_t len = sizeof(ours);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &len) != 0) return false;
  len = sizeof(theirs);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &len) != 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int unacknowledged = -1;
    const bool delivered = ::ioctl(fd, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0;
    // The peer socket is the one whose local end is our remote end.
    if (delivered && ReceiveQueueBytes(theirs, ours) == 0) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace mlaserve::testing
