// Field readers check types before nlohmann's accessors run, so none of them throws.
#include "tokenizer/json_fields.h"

namespace mlaserve {
namespace {

constexpr int64_t kMaxTokenIdExclusive = int64_t{1} << 24;

// "file: section.key", or "file: key" for top-level fields (where = "file: ").
std::string FieldName(const std::string& where, std::string_view key) {
  if (where.ends_with(": ")) return where + std::string(key);
  return where + "." + std::string(key);
}

}  // namespace

Result<nlohmann::json> ParseJsonText(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {
    return Status::Error(source + ": not valid JSON: " + error.what());
  }
}

Status ReadOptionalBool(const nlohmann::json& object, std::string_view key,
                        const std::string& where, bool fallback, bool* out) {
  *out = fallback;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return Status::Error(FieldName(where, key) + " must be a boolean");
  *out = it->get<bool>();
  return Status::Ok();
}

Status ReadOptionalString(const nlohmann::json& object, std::string_view key,
                          const std::string& where, std::optional<std::string>* out) {
  out->reset();
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Status::Error(FieldName(where, key) + " must be a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

bool TryReadTokenId(const nlohmann::json& value, int32_t* out) {
  if (!value.is_number_integer()) return false;
  const auto id = value.get<int64_t>();
  if (id < 0 || id >= kMaxTokenIdExclusive) return false;
  *out = static_cast<int32_t>(id);
  return true;
}

Status ReadTokenId(const nlohmann::json& value, const std::string& where, int32_t* out) {
  if (!value.is_number_integer()) return Status::Error(where + " must be an integer token id");
  const auto id = value.get<int64_t>();
  if (id < 0 || id >= kMaxTokenIdExclusive) {
    return Status::Error(where + " = " + std::to_string(id) + " is out of range [0, 2^24)");
  }
  *out = static_cast<int32_t>(id);
  return Status::Ok();
}

}  // namespace mlaserve
