#include "server/sampling_json.h"

#include <cmath>
#include <optional>
#include <string_view>

#include "server/client_json.h"

namespace mlaserve {
namespace {

using nlohmann::json;

// `text` as a decimal integer ("-" and digits, nothing else) when it is a token id in
// [0, vocab_size). Digits are accumulated only while the value could still fit, so a key of any
// length is judged by its true value.
std::optional<TokenId> VocabularyToken(std::string_view text, int vocab_size) {
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    if (value < vocab_size) value = value * 10 + (c - '0');  // stops growing past the vocabulary
  }
  if ((negative && value != 0) || value >= vocab_size) return std::nullopt;
  return TokenId(value);
}

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
  // A list of token ids of the vocabulary; one outside it is named as the client wrote it.
  void TokenIds(const char* key, int vocab_size, std::vector<TokenId>& out) {
    if (!Has(key)) return;
    const json& v = j_[key];
    if (!v.is_array()) return Fail(key, "must be a list of token ids");
    out.clear();
    for (const json& id : v) {
      if (!id.is_number_integer()) return Fail(key, "must be a list of token ids");
      const TokenId token = TokenIdFromJson(id);
      if (token < 0 || token >= vocab_size) {
        return FailWith("'" + std::string(key) + "' item " + id.dump() + " is outside the vocabulary [0, " +
                        std::to_string(vocab_size) + ")");
      }
      out.push_back(token);
    }
  }
  // OpenAI's {"token id as a string": bias}. A key is read as the whole integer it spells (no
  // wrap-around, whatever its length) and must be a token of the vocabulary; a refusal quotes
  // the key as the client wrote it.
  void LogitBiasMap(const char* key, int vocab_size, std::vector<LogitBias>& out) {
    if (!Has(key)) return;
    const json& v = j_[key];
    if (!v.is_object()) return Fail(key, "must be an object mapping token ids (as strings) to biases");
    out.clear();
    for (const auto& [token, bias] : v.items()) {
      const std::optional<TokenId> id = VocabularyToken(token, vocab_size);
      if (!id) {
        return FailWith("'" + std::string(key) + "' key '" + token + "' is not a token id in [0, " +
                        std::to_string(vocab_size) + ")");
      }
      if (!bias.is_number()) return Fail(key, "values must be numbers in [-100, 100]");
      out.push_back({.token = *id, .bias = bias.get<float>()});
    }
  }
  void Fail(const char* key, const char* what) { FailWith(std::string("'") + key + "' " + what); }
  void FailWith(std::string message) {
    if (status_.ok()) status_ = Status::Error(std::move(message));
  }

 private:
  const json& j_;
  Status status_;
};

void ReadShared(Reader& r, int vocab_size, SamplingParams& p) {
  r.Float("temperature", p.temperature);
  r.Float("top_p", p.top_p);
  r.Int("top_k", p.top_k);
  r.Float("min_p", p.min_p);
  r.Float("repetition_penalty", p.repetition_penalty);
  r.Float("frequency_penalty", p.frequency_penalty);
  r.Float("presence_penalty", p.presence_penalty);
  r.Stop("stop", p.stop);
  r.TokenIds("stop_token_ids", vocab_size, p.stop_token_ids);
  r.Bool("ignore_eos", p.ignore_eos);
  r.Bool("skip_special_tokens", p.skip_special_tokens);
  r.Bool("no_stop_trim", p.no_stop_trim);
  r.LogitBiasMap("logit_bias", vocab_size, p.logit_bias);
}

}  // namespace

Result<SamplingParams> SamplingFromNative(const json& j, int vocab_size) {
  SamplingParams p;
  p.temperature = kApiDefaultTemperature;
  if (j.is_null()) return p;
  if (!j.is_object()) return Status::Error("'sampling_params' must be an object");
  MLA_RETURN_IF_ERROR(CheckFields(
      j,
      {{"temperature"}, {"top_p"}, {"top_k"}, {"min_p"}, {"repetition_penalty"}, {"frequency_penalty"},
       {"presence_penalty"}, {"max_new_tokens"}, {"min_new_tokens"}, {"stop"}, {"stop_token_ids"},
       {"ignore_eos"}, {"skip_special_tokens"}, {"no_stop_trim"}, {"seed"}, {"sampling_seed"}, {"logit_bias"},
       {"n"},
       {"spaces_between_special_tokens", "only true (the default) is implemented", "true"},
       {"regex", "constrained decoding is not implemented"},
       {"json_schema", "constrained decoding is not implemented"},
       {"ebnf", "constrained decoding is not implemented"},
       {"structural_tag", "constrained decoding is not implemented"},
       {"custom_params", "custom logit processors are not implemented"},
       {"stream_interval", "streaming sends every token; only 1 is implemented", "1"}},
      "sampling_params: "));
  Reader r(j);
  ReadShared(r, vocab_size, p);
  r.Int("max_new_tokens", p.max_new_tokens);
  r.Int("min_new_tokens", p.min_new_tokens);
  r.Seed("sampling_seed", p.seed);
  r.Seed("seed", p.seed);
  if (!r.status().ok()) return r.status();
  return p;
}

Result<SamplingParams> SamplingFromOpenAi(const json& j, int default_max_tokens, int vocab_size) {
  SamplingParams p;
  p.temperature = kApiDefaultTemperature;
  p.max_new_tokens = default_max_tokens;
  Reader r(j);
  ReadShared(r, vocab_size, p);
  r.Int("max_tokens", p.max_new_tokens);
  r.Int("max_completion_tokens", p.max_new_tokens);
  r.Int("min_tokens", p.min_new_tokens);
  r.Seed("seed", p.seed);
  if (!r.status().ok()) return r.status();
  return p;
}

}  // namespace mlaserve
