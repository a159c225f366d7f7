// Reading a config.json's fields with one error line naming the field and the file: the
// model's config (model/config.cc) and an EAGLE-3 draft's (model/eagle3_draft.cc). The first
// failure is kept (error()); each getter then returns its fallback, so a reader checks error()
// once after reading every field.
// Integers are range-checked on the whole JSON value before they are narrowed to int (nlohmann
// keeps a non-negative integer as uint64 and a negative one as int64; a cast would keep the low
// 32 bits, so 4294967297 layers would read as 1).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/json_quote.h"
#include "core/status.h"

namespace mlaserve {

// The inclusive range an integer field must lie in; both ends fit an int.
struct IntRange {
  int min = 0;
  int max = std::numeric_limits<int>::max();
};

// Bounds on the sizes config.json declares. Far above any published model (DeepSeek-V3 and the
// Kimi-K2 family: 61 layers, hidden 7168, 384 experts, vocabulary 163840), and low enough that
// the loader's per-layer and per-expert bookkeeping, sized from the config before any tensor is
// checked, and the int products of these sizes (heads * head_dim) stay small.
namespace config_limits {
inline constexpr int kMaxLayers = 1024;
inline constexpr int kMaxExperts = 4096;
inline constexpr int kMaxHeads = 1024;
inline constexpr int kMaxHeadDim = 4096;
inline constexpr int kMaxHidden = 1 << 16;
inline constexpr int kMaxIntermediate = 1 << 20;
inline constexpr int kMaxRank = 1 << 16;  // q_lora_rank, kv_lora_rank
inline constexpr int kMaxVocab = 1 << 24;
inline constexpr int kMaxBlock = 1 << 16;  // quantization block and group sizes
inline constexpr int kMaxNextnLayers = 64;
// Routed experts over all layers (num_hidden_layers x n_routed_experts): the loader binds each.
inline constexpr int64_t kMaxTotalExperts = 1 << 18;
}  // namespace config_limits

// `v` as an int when it is a JSON integer in `range`; nullopt for anything else (a float, a
// string, an integer outside the range however large).
inline std::optional<int> IntInRange(const nlohmann::json& v, IntRange range) {
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int>::max())) return std::nullopt;
    value = int64_t(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (value < range.min || value > range.max) return std::nullopt;
  return int(value);
}

// "must be an integer in [min, max], got V": the one wording for every integer field.
inline std::string NotAnIntegerIn(IntRange range, const nlohmann::json& v) {
  return "must be an integer in [" + std::to_string(range.min) + ", " + std::to_string(range.max) + "], got " +
         QuoteJson(v);
}

class FieldReader {
 public:
  // `prefix` goes before each key in errors ("rope_scaling." for a nested object's fields).
  FieldReader(const nlohmann::json& j, const std::string& source, std::string prefix = "")
      : j_(j), source_(source), prefix_(std::move(prefix)) {}

  Status error() const { return error_; }

  int Int(const char* key, IntRange range, int fallback, bool required) {
    const nlohmann::json* v = Get(key, required);
    if (v == nullptr) return fallback;
    const std::optional<int> value = IntInRange(*v, range);
    if (!value) return Fail(key, NotAnIntegerIn(range, *v)), fallback;
    return *value;
  }
  // An integer field where JSON null means "absent" (q_lora_rank).
  int NullableInt(const char* key, IntRange range, int null_value) {
    if (!j_.contains(key) || j_[key].is_null()) return null_value;
    return Int(key, range, null_value, true);
  }
  double Double(const char* key, double fallback, bool required) {
    const nlohmann::json* v = Get(key, required);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Fail(key, "must be a number"), fallback;
    return v->get<double>();
  }
  bool Bool(const char* key, bool fallback) {
    const nlohmann::json* v = Get(key, false);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Fail(key, "must be true or false"), fallback;
    return v->get<bool>();
  }
  std::string String(const char* key, const char* fallback) {
    const nlohmann::json* v = Get(key, false);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Fail(key, "must be a string"), fallback;
    return v->get<std::string>();
  }
  void Fail(const std::string& key, const std::string& what) {
    if (error_.ok()) error_ = Status::Error(source_ + ": field '" + prefix_ + key + "' " + what);
  }

 private:
  const nlohmann::json* Get(const char* key, bool required) {
    if (!j_.is_object() || !j_.contains(key) || j_[key].is_null()) {
      if (required) Fail(key, "is missing");
      return nullptr;
    }
    return &j_[key];
  }
  const nlohmann::json& j_;
  const std::string& source_;
  std::string prefix_;
  Status error_;
};

}  // namespace mlaserve
