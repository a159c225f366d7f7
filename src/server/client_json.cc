#include "server/client_json.h"

#include <algorithm>

namespace mlaserve {

using nlohmann::json;

namespace {

// The deepest [ / { nesting in `text`, ignoring brackets inside strings; stops counting (and
// returns max_depth + 1) as soon as the bound is passed. Malformed text is left to the parser.
int NestingDepth(std::string_view text, int max_depth) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        deepest = std::max(deepest, ++depth);
        if (deepest > max_depth) return deepest;
        break;
      case ']':
      case '}': --depth; break;
      default: break;
    }
  }
  return deepest;
}

}  // namespace

Result<json> ParseClientJson(std::string_view text, int max_depth) {
  if (NestingDepth(text, max_depth) > max_depth) {
    return Status::Error("the request body is nested deeper than " + std::to_string(max_depth) +
                         " levels of arrays/objects");
  }
  json value = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return Status::Error("the request body is not valid JSON (or not valid UTF-8)");
  return value;
}

Status CheckFields(const json& object, std::span<const FieldRule> rules, std::string_view where) {
  std::string unknown;
  for (const auto& [key, value] : object.items()) {
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : rules) {
      if (key == r.name) rule = &r;
    }
    if (rule == nullptr) {
      unknown += (unknown.empty() ? "'" : ", '") + key + "'";
      continue;
    }
    if (rule->refused_because == nullptr || value.is_null()) continue;
    if (rule->accepted_value != nullptr && value == json::parse(rule->accepted_value)) continue;
    return Status::Error(std::string(where) + "'" + key + "' is not supported: " + rule->refused_because);
  }
  if (unknown.empty()) return Status::Ok();
  return Status::Error(std::string(where) + "unknown field" + (unknown.find(',') != std::string::npos ? "s " : " ") +
                       unknown + " (mlaserve refuses fields it does not implement; see docs/server.md)");
}

Result<bool> BoolField(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return Status::Error(std::string("'") + key + "' must be true or false");
  return j[key].get<bool>();
}

Result<int> IntField(const json& j, const char* key, int fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) return Status::Error(std::string("'") + key + "' must be an integer");
  if (j[key].is_number_unsigned() && j[key].get<uint64_t>() > (uint64_t(1) << 30)) {
    return Status::Error(std::string("'") + key + "' is out of range");
  }
  const int64_t v = j[key].get<int64_t>();
  if (v < -(int64_t(1) << 30) || v > (int64_t(1) << 30)) return Status::Error(std::string("'") + key + "' is out of range");
  return int(v);
}

TokenId TokenIdFromJson(const json& id) {
  if (id.is_number_unsigned()) return id.get<uint64_t>() > uint64_t(INT32_MAX) ? -1 : TokenId(id.get<uint64_t>());
  const int64_t v = id.get<int64_t>();
  return v < 0 || v > INT32_MAX ? -1 : TokenId(v);
}

}  // namespace mlaserve
