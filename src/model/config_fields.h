// Reading a config.json's fields with one error line naming the field and the file: the
// model's config (model/config.cc) and an EAGLE-3 draft's (model/eagle3_draft.cc). The first
// failure is kept (error()); each getter then returns its fallback, so a reader checks error()
// once after reading every field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace mlaserve {

class FieldReader {
 public:
  FieldReader(const nlohmann::json& j, const std::string& source) : j_(j), source_(source) {}

  Status error() const { return error_; }

  int Int(const char* key, int fallback, bool required) {
    const nlohmann::json* v = Get(key, required);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) return Fail(key, "must be an integer"), fallback;
    return v->get<int>();
  }
  // An integer field where JSON null means "absent" (q_lora_rank).
  int NullableInt(const char* key, int null_value) {
    if (!j_.contains(key) || j_[key].is_null()) return null_value;
    return Int(key, null_value, true);
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
    if (error_.ok()) error_ = Status::Error(source_ + ": field '" + key + "' " + what);
  }

 private:
  const nlohmann::json* Get(const char* key, bool required) {
    if (!j_.contains(key) || j_[key].is_null()) {
      if (required) Fail(key, "is missing");
      return nullptr;
    }
    return &j_[key];
  }
  const nlohmann::json& j_;
  const std::string& source_;
  Status error_;
};

}  // namespace mlaserve
