#include "server/openai_logprobs.h"

#include <cmath>
#include <span>
#include <string>
#include <string_view>

namespace mlaserve {
namespace {

using nlohmann::json;

// Characters (code points) of valid UTF-8, as Python clients count text_offset.
int64_t CodePoints(std::string_view text) {
  int64_t n = 0;
  for (const char c : text) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

json OpenAiLogprobs::Empty() const {
  return chat_ ? json::array()
               : json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                      {"top_logprobs", json::array()}, {"text_offset", json::array()}};
}

void OpenAiLogprobs::AddToken(TokenId t, std::optional<float> logprob, const std::vector<TokenLogprob>* top,
                              json& out, int64_t& text_offset) const {
  const std::string token = tokenizer_.Decode(std::span(&t, 1));
  json top_map = json::object(), top_list = json::array();
  if (top != nullptr) {
    for (const TokenLogprob& tl : *top) {
      const std::string s = tokenizer_.Decode(std::span(&tl.token, 1));
      top_map[s] = tl.logprob;
      const std::string_view b = tokenizer_.TokenBytes(tl.token);
      top_list.push_back({{"token", s}, {"logprob", tl.logprob}, {"bytes", std::vector<uint8_t>(b.begin(), b.end())}});
    }
  }
  if (chat_) {
    const std::string_view raw = tokenizer_.TokenBytes(t);
    out.push_back({{"token", token}, {"logprob", logprob ? json(*logprob) : json()},
                   {"bytes", std::vector<uint8_t>(raw.begin(), raw.end())}, {"top_logprobs", top_list}});
    return;
  }
  out["tokens"].push_back(token);
  out["token_logprobs"].push_back(logprob ? json(*logprob) : json());
  out["top_logprobs"].push_back(top != nullptr ? top_map : json());
  out["text_offset"].push_back(text_offset);
  // Offsets index the choice's text, which shows no special tokens (an echoed BOS).
  if (!tokenizer_.IsSpecial(t)) text_offset += CodePoints(token);
}

void OpenAiLogprobs::AddOutput(const RequestOutput& o, json& out, int64_t& text_offset) const {
  for (size_t i = 0; i < o.new_token_logprobs.size() && i < o.new_token_ids.size(); ++i) {
    AddToken(o.new_token_ids[i], o.new_token_logprobs[i], i < o.new_top_logprobs.size() ? &o.new_top_logprobs[i] : nullptr,
             out, text_offset);
  }
}

void OpenAiLogprobs::AddPrompt(const RequestOutput& o, json& out, int64_t& text_offset) const {
  for (size_t i = 0; i < o.input_token_ids.size(); ++i) {
    const float lp = i < o.input_token_logprobs.size() ? o.input_token_logprobs[i] : NAN;
    const std::vector<TokenLogprob>* top =
        i < o.input_top_logprobs.size() && !o.input_top_logprobs[i].empty() ? &o.input_top_logprobs[i] : nullptr;
    AddToken(o.input_token_ids[i], std::isnan(lp) ? std::nullopt : std::optional<float>(lp), top, out, text_offset);
  }
}

}  // namespace mlaserve
