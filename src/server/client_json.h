// Reading a client's JSON safely: a nesting bound checked before anything is built (a value
// nested 100,000 deep would otherwise be copied and destroyed recursively and overflow the
// stack), typed optional fields that never throw, and a per-endpoint table of the fields it
// knows, so that a field mlaserve does not implement is refused by name, never ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/types.h"

namespace mlaserve {

// Deepest nesting of arrays and objects a request body may have. The APIs need at most 5
// (a chat message's content parts); 64 leaves room and bounds every recursive walk.
inline constexpr int kMaxClientJsonDepth = 64;

// Parses `text` as one JSON value. Errors (one line, for a 400): not valid JSON or UTF-8, or
// nested deeper than max_depth ("... nested deeper than 64 levels"). The depth is measured by
// a linear scan before parsing, so a hostile body costs O(size) and no recursion.
Result<nlohmann::json> ParseClientJson(std::string_view text, int max_depth = kMaxClientJsonDepth);

// How an endpoint treats one request field.
struct FieldRule {
  const char* name;
  // nullptr: implemented. Otherwise the field is refused with this reason whenever present
  // and not null, unless `accepted_value` matches (a value that asks for the default
  // behaviour, e.g. "n": 1), given as JSON text.
  const char* refused_because = nullptr;
  const char* accepted_value = nullptr;
};

// The first field of `object` that `rules` does not name ("unknown field 'x'") or refuses
// ("'tools' is not supported: ..."); every unknown field is listed in one message. `where`
// prefixes the message (e.g. "sampling_params: ").
Status CheckFields(const nlohmann::json& object, std::span<const FieldRule> rules, std::string_view where = "");
inline Status CheckFields(const nlohmann::json& object, std::initializer_list<FieldRule> rules,
                          std::string_view where = "") {
  return CheckFields(object, std::span<const FieldRule>(rules.begin(), rules.size()), where);
}

// Typed optional fields (json's own value() throws on a mismatched type). Absent or null
// gives `fallback`; a wrong type is an error naming the key.
Result<bool> BoolField(const nlohmann::json& object, const char* key, bool fallback);
// An integer in [-2^30, 2^30].
Result<int> IntField(const nlohmann::json& object, const char* key, int fallback);

// A JSON integer as a token id, without wrapping: anything outside [0, INT32_MAX] becomes -1,
// which the engine rejects as outside the vocabulary. `id` must be an integer.
TokenId TokenIdFromJson(const nlohmann::json& id);

}  // namespace mlaserve
