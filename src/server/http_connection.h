// One client connection and how a handler thread answers the request it holds. The event loop
// (http_event_loop.h) reads requests into HttpConnection; a handler thread then calls
// AnswerRequest, which runs the handler and writes its response, and hands the connection back.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "server/http_parser.h"
#include "server/http_server.h"
#include "server/socket_io.h"

namespace mlaserve {

// Ownership: exactly one of the event loop (between requests), the handler-thread queue, or one
// handler thread (while its request is answered) holds a connection at a time, so nothing in it
// needs a lock.
struct HttpConnection {
  HttpConnection(UniqueFd socket, const HttpParseLimits& limits)
      : fd(std::move(socket)), parser(limits) {}

  UniqueFd fd;               // a non-blocking, accepted TCP socket
  HttpRequestParser parser;  // in State::kDone when handed to a handler thread
  std::string unparsed;      // received past the request: the next, pipelined one (one read's worth)
  bool close_after = false;  // answer with "Connection: close" whatever the client asked

  // Set by the handler thread that hands the connection back to the event loop: whether it may
  // carry another request, and the next connection handed back (an intrusive list, so handing
  // back never allocates).
  bool keep_open = false;
  std::unique_ptr<HttpConnection> next_handed_back;
};

// What AnswerRequest borrows from its server; everything outlives the handler threads.
struct HttpAnswerContext {
  const HttpServerOptions* options = nullptr;
  const HttpHandler* handler = nullptr;
  const std::atomic<bool>* stopping = nullptr;  // set: every response says "Connection: close"
};

// Runs the handler on the complete request in connection.parser (moving it out) and writes the
// response on the calling thread, waiting up to options->read_timeout_ms whenever the client
// stops taking bytes. Returns true when the connection may carry another request (the response
// went out whole and both sides keep the connection); false: the caller should close it. Never
// throws: a handler's exception gets a 500 when nothing was sent yet (else the response is cut
// short); an allocation failure just ends the connection.
[[nodiscard]] bool AnswerRequest(HttpConnection& connection,
                                 const HttpAnswerContext& context) noexcept;

}  // namespace mlaserve
