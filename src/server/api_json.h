// Small response helpers shared by the API handlers (api_server.cc, native_api.cc,
// openai_response.cc and the endpoints' files): JSON bodies, OpenAI-shaped errors and SSE events.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/http_response.h"
#include "server/http_server.h"

namespace mlaserve::api {

// Invalid UTF-8 in generated text (a token cut mid-character) is replaced, never thrown on.
inline std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline void SendJson(HttpResponseWriter& w, int status, const nlohmann::json& j) {
  w.Send(status, "application/json", Dump(j));
}

inline void SendError(HttpResponseWriter& w, int status, const std::string& message,
                      const char* type = "invalid_request_error") {
  w.Send(status, "application/json", JsonError(status, message, type));
}

// One server-sent event; false once the client has gone.
inline bool WriteEvent(HttpResponseWriter& w, const nlohmann::json& j) {
  return w.Write("data: " + Dump(j) + "\n\n");
}

// Ends an SSE stream the way OpenAI and SGLang do.
inline void EndEvents(HttpResponseWriter& w) {
  w.Write("data: [DONE]\n\n");
  w.EndStream();
}

// A request the engine refused: 503 while the server drains (it refuses new work), else 400.
inline void SendRefusal(HttpResponseWriter& w, const std::string& message, bool draining) {
  if (draining) return SendError(w, 503, message, "service_unavailable");
  SendError(w, 400, message);
}

}  // namespace mlaserve::api
