// Response heads and JSON errors; see http_response.h.
#include "server/http_response.h"

#include "server/http_syntax.h"

namespace mlaserve {
namespace {

bool IsSafeHeaderValue(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// Extra fields a handler may add: well-formed, and not one that frames the body or the
// connection (the writer owns those).
bool IsAllowedExtraHeader(std::string_view name, std::string_view value) {
  if (!IsHttpToken(name) || !IsSafeHeaderValue(value)) return false;
  for (std::string_view owned : {"content-length", "transfer-encoding", "connection"}) {
    if (EqualsIgnoreCaseAscii(name, owned)) return false;
  }
  return true;
}

// Length of the valid UTF-8 sequence at the start of `text`, or 0 when it is not one
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t Utf8SequenceLength(std::string_view text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  auto continuation = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0 && byte(1) < 0xA0) return 0;  // overlong
    if (lead == 0xED && byte(1) > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0 && byte(1) < 0x90) return 0;  // overlong
    if (lead == 0xF4 && byte(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  while (!text.empty()) {
    auto c = static_cast<unsigned char>(text.front());
    size_t length = 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          length = Utf8SequenceLength(text);
          if (length == 0) {
            out += "\\ufffd";
            length = 1;
          } else {
            out.append(text.substr(0, length));
          }
        }
    }
    text.remove_prefix(length);
  }
  out += '"';
}

std::string JsonError(int status, std::string_view message, std::string_view type) {
  std::string json = "{\"error\":{\"message\":";
  AppendJsonString(json, message);
  json += ",\"type\":";
  AppendJsonString(json, type);
  json += ",\"param\":null,\"code\":";
  json += std::to_string(status);
  json += "}}";
  return json;
}

std::string_view JsonErrorType(int status) {
  return status >= 400 && status < 500 ? "invalid_request_error" : "server_error";
}

std::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string FormatResponseHead(const HttpResponseHead& head) {
  std::string out = "HTTP/1.1 ";
  out += std::to_string(head.status);
  out += ' ';
  out += HttpReasonPhrase(head.status);
  out += "\r\n";
  if (!head.content_type.empty() && IsSafeHeaderValue(head.content_type)) {
    out += "Content-Type: ";
    out += head.content_type;
    out += "\r\n";
  }
  switch (head.framing) {
    case HttpBodyFraming::kContentLength:
      out += "Content-Length: ";
      out += std::to_string(head.content_length_bytes);
      out += "\r\n";
      break;
    case HttpBodyFraming::kChunked:
      out += "Transfer-Encoding: chunked\r\n";
      break;
    case HttpBodyFraming::kUntilClose:
      break;
  }
  if (!head.connection.empty()) {
    out += "Connection: ";
    out += head.connection;
    out += "\r\n";
  }
  if (head.extra_headers != nullptr) {
    for (const auto& [name, value] : *head.extra_headers) {
      if (!IsAllowedExtraHeader(name, value)) continue;
      out += name;
      out += ": ";
      out += value;
      out += "\r\n";
    }
  }
  out += "\r\n";
  return out;
}

std::string ErrorResponse(int status, std::string_view message,
                          const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  const std::string body = JsonError(status, message, JsonErrorType(status));
  return FormatResponseHead({.status = status,
                             .content_type = "application/json",
                             .content_length_bytes = body.size(),
                             .connection = "close",
                             .extra_headers = &extra_headers}) +
         body;
}

}  // namespace mlaserve
