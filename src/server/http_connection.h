// Serving one accepted connection: read a request (pipelined ones in order), run the handler,
// write its response, repeat while the connection stays persistent.
#pragma once

#include <atomic>

#include "server/http_server.h"
#include "server/socket_io.h"

namespace mlaserve {

// What a connection borrows from its server. Everything outlives the connection thread.
struct HttpConnectionContext {
  const HttpServerOptions* options = nullptr;
  const HttpHandler* handler = nullptr;
  int stop_fd = -1;  // readable once the server stops: idle connections close
  const std::atomic<bool>* stopping = nullptr;  // the same, checked before each response
};

// Serves `fd` (a non-blocking, accepted TCP socket) on the calling thread until the connection
// ends, then closes it. Never throws: a handler's exception gets a 500 when no response was
// started (else the connection closes); any other failure (allocation) drops the connection.
void ServeHttpConnection(UniqueFd fd, const HttpConnectionContext& context) noexcept;

}  // namespace mlaserve
