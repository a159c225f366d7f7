#include "server/sampling_json.h"

#include <cmath>

namespace mlaserve {
namespace {

using nlohmann::json;

// Typed reads that remember the first problem.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}
  const Status& status() const { return status_; }
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  void Float(const char* key, float& out) {
    if (!Has(key)) return;
    if (!j_[key].is_number()) return Fail(key, "must be a number");
    out = j_[key].get<float>();
  }
  void Int(const char* key, int& out) {
    if (!Has(key)) return;
    const json& v = j_[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return Fail(key, "must be an integer");
    }
    const double d = v.get<double>();
    if (d < -2147483647.0 || d > 2147483647.0) return Fail(key, "is out of range");
    out = int(d);
  }
  void Bool(const char* key, bool& out) {
    if (!Has(key)) return;
    if (!j_[key].is_boolean()) return Fail(key, "must be true or false");
    out = j_[key].get<bool>();
  }
  void Seed(const char* key, std::optional<uint64_t>& out) {
    if (!Has(key)) return;
    if (!j_[key].is_number_integer()) return Fail(key, "must be an integer");
    out = j_[key].is_number_unsigned() ? j_[key].get<uint64_t>() : uint64_t(j_[key].get<int64_t>());
  }
  void Stop(const char* key, std::vector<std::string>& out) {
    if (!Has(key)) return;
    const json& v = j_[key];
    if (v.is_string()) {
      out = {v.get<std::string>()};
    } else if (v.is_array()) {
      out.clear();
      for (const json& s : v) {
        if (!s.is_string()) return Fail(key, "must be a string or a list of strings");
        out.push_back(s.get<std::string>());
      }
    } else {
      Fail(key, "must be a string or a list of strings");
    }
  }
  void TokenIds(const char* key, std::vector<TokenId>& out) {
    if (!Has(key)) return;
    const json& v = j_[key];
    if (!v.is_array()) return Fail(key, "must be a list of token ids");
    out.clear();
    for (const json& id : v) {
      if (!id.is_number_integer()) return Fail(key, "must be a list of token ids");
      const bool fits = id.is_number_unsigned() ? id.get<uint64_t>() <= uint64_t(INT32_MAX)
                                                : id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX;
      out.push_back(fits ? TokenId(id.get<int64_t>()) : -1);  // -1: rejected as outside the vocabulary
    }
  }
  void Fail(const char* key, const char* what) {
    if (status_.ok()) status_ = Status::Error(std::string("'") + key + "' " + what);
  }

 private:
  const json& j_;
  Status status_;
};

void ReadShared(Reader& r, SamplingParams& p) {
  r.Float("temperature", p.temperature);
  r.Float("top_p", p.top_p);
  r.Int("top_k", p.top_k);
  r.Float("min_p", p.min_p);
  r.Float("repetition_penalty", p.repetition_penalty);
  r.Float("frequency_penalty", p.frequency_penalty);
  r.Float("presence_penalty", p.presence_penalty);
  r.Stop("stop", p.stop);
  r.TokenIds("stop_token_ids", p.stop_token_ids);
  r.Bool("ignore_eos", p.ignore_eos);
  r.Bool("skip_special_tokens", p.skip_special_tokens);
  r.Bool("no_stop_trim", p.no_stop_trim);
}

}  // namespace

Result<SamplingParams> SamplingFromNative(const json& j) {
  SamplingParams p;
  p.temperature = kApiDefaultTemperature;
  if (j.is_null()) return p;
  if (!j.is_object()) return Status::Error("'sampling_params' must be an object");
  Reader r(j);
  ReadShared(r, p);
  r.Int("max_new_tokens", p.max_new_tokens);
  r.Int("min_new_tokens", p.min_new_tokens);
  r.Seed("sampling_seed", p.seed);
  r.Seed("seed", p.seed);
  if (!r.status().ok()) return r.status();
  return p;
}

Result<SamplingParams> SamplingFromOpenAi(const json& j, int default_max_tokens) {
  SamplingParams p;
  p.temperature = kApiDefaultTemperature;
  p.max_new_tokens = default_max_tokens;
  Reader r(j);
  ReadShared(r, p);
  r.Int("max_tokens", p.max_new_tokens);
  r.Int("max_completion_tokens", p.max_new_tokens);
  r.Int("min_tokens", p.min_new_tokens);
  r.Seed("seed", p.seed);
  if (r.Has("n")) {
    int n = 1;
    r.Int("n", n);
    if (r.status().ok() && n != 1) return Status::Error("'n' other than 1 is not supported");
  }
  if (!r.status().ok()) return r.status();
  return p;
}

}  // namespace mlaserve
