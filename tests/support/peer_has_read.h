// For tests that must send a message in pieces and know the other end took each piece on its
// own: waits until the application at the other end of a loopback TCP socket has read every
// byte sent on it, a socket state rather than a guessed sleep.
#pragma once

#include <chrono>

namespace mlaserve::testing {

// True once every byte written to `fd` (a connected IPv4 loopback TCP socket of this machine)
// has been acknowledged by the peer's kernel (SIOCOUTQ is 0) and read from the peer socket's
// receive queue by its application (rx_queue 0 in /proc/net/tcp); false after `timeout`.
bool PeerHasRead(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace mlaserve::testing
