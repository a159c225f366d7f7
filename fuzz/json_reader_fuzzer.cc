// The server's reading of a request body (server/client_json.h): ParseClientJson's depth scan
// and parse, then what handlers do with any parsed body: the typed field readers, the field
// table check, token ids from integers, the ordered re-parse of the raw body (HandleChat) and
// the dump with invalid UTF-8 replaced.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "nlohmann/json.hpp"
#include "server/client_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = mlaserve::fuzz::AsText(data, size);
  auto parsed = mlaserve::ParseClientJson(text);
  if (!parsed.ok()) return 0;
  const nlohmann::json& body = *parsed;
  (void)body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)nlohmann::ordered_json::parse(text, nullptr, false);
  if (body.is_object()) {
    (void)mlaserve::CheckFields(body, {{"model"}, {"stream"}, {"n"}, {"tools", "not here", "[]"},
                                       {"best_of", "not implemented", "1"}});
    (void)mlaserve::BoolField(body, "stream", false);
    (void)mlaserve::IntField(body, "n", 1);
    for (const auto& [key, value] : body.items()) {
      (void)mlaserve::BoolField(body, key.c_str(), true);
      (void)mlaserve::IntField(body, key.c_str(), 0);
      if (value.is_number_integer()) (void)mlaserve::TokenIdFromJson(value);
    }
  } else if (body.is_array()) {
    for (const auto& element : body) {
      if (element.is_number_integer()) (void)mlaserve::TokenIdFromJson(element);
    }
  }
  return 0;
}
