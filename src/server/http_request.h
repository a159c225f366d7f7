// One parsed HTTP request, as a handler sees it. Produced by HttpRequestParser (http_parser.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlaserve {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... (case as sent; methods are case-sensitive)
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target without the query: "/v1/models"
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;    // decoded (chunked bodies arrive here already de-chunked)

  // The first header with this (lower-case) name, or nullptr when absent. The pointer is valid
  // while the request is alive and its headers are not modified.
  const std::string* Header(std::string_view lower_name) const {
    for (const auto& [name, value] : headers) {
      if (name == lower_name) return &value;
    }
    return nullptr;
  }
  // The first query parameter `name` of the target ("/dashboard?key=a%20b" -> "a b"), percent-
  // and plus-decoded (a malformed escape stays as sent); nullopt when absent (http_parser.cc).
  std::optional<std::string> QueryParameter(std::string_view name) const;
};

}  // namespace mlaserve
