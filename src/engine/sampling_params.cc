#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mlaserve {
namespace {

std::string FormatNumber(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

Status RangeError(const char* field, const char* range, double value) {
  return Status::Error(std::string(field) + " must be " + range + ", got " + FormatNumber(value));
}

// Closed interval test written so that NaN fails it.
bool InClosed(float value, float lo, float hi) { return value >= lo && value <= hi; }

}  // namespace

Status Validate(const SamplingParams& p, int vocab_size) {
  if (!(std::isfinite(p.temperature) && p.temperature >= 0.0f)) {
    return RangeError("temperature", "a finite number >= 0 (0 = greedy)", p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return RangeError("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < -1) return RangeError("top_k", "-1 or 0 (all tokens) or at least 1", p.top_k);
  if (!InClosed(p.min_p, 0.0f, 1.0f)) return RangeError("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) {
    return RangeError("repetition_penalty", "in (0, 2] (1 = off)", p.repetition_penalty);
  }
  if (!InClosed(p.frequency_penalty, -2.0f, 2.0f)) {
    return RangeError("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  if (!InClosed(p.presence_penalty, -2.0f, 2.0f)) {
    return RangeError("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (p.max_new_tokens < 0) return RangeError("max_new_tokens", "at least 0", p.max_new_tokens);
  if (p.min_new_tokens < 0 || p.min_new_tokens > p.max_new_tokens) {
    return RangeError("min_new_tokens",
                      ("in [0, max_new_tokens (" + std::to_string(p.max_new_tokens) + ")]").c_str(),
                      p.min_new_tokens);
  }
  if (p.stop.size() > size_t(kMaxStopStrings)) {
    return Status::Error("stop must hold at most " + std::to_string(kMaxStopStrings) +
                         " strings, got " + std::to_string(p.stop.size()));
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) return Status::Error("stop[" + std::to_string(i) + "] must not be empty");
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const TokenId id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return Status::Error("stop_token_ids[" + std::to_string(i) + "] must be in [0, " +
                           std::to_string(vocab_size) + "), got " + std::to_string(id));
    }
  }
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const LogitBias& b = p.logit_bias[i];
    if (b.token < 0 || b.token >= vocab_size) {
      return Status::Error("logit_bias token " + std::to_string(b.token) + " must be in [0, " +
                           std::to_string(vocab_size) + ")");
    }
    if (!InClosed(b.bias, -kMaxLogitBias, kMaxLogitBias)) {
      return Status::Error("logit_bias for token " + std::to_string(b.token) + " must be in [-100, 100], got " +
                           std::to_string(b.bias));
    }
  }
  if (p.top_logprobs_num < 0 || p.top_logprobs_num > kMaxTopLogprobs) {
    return RangeError("top_logprobs_num", ("in [0, " + std::to_string(kMaxTopLogprobs) + "]").c_str(),
                      p.top_logprobs_num);
  }
  return Status::Ok();
}

bool IsGreedy(const SamplingParams& p) { return p.temperature < kGreedyTemperature || p.top_k == 1; }

uint64_t ResolveSeed(const SamplingParams& p, uint64_t request_seed) {
  return p.seed.value_or(request_seed);
}

bool IsStopToken(const SamplingParams& p, std::span<const TokenId> eos_token_ids, TokenId token) {
  if (p.ignore_eos) return false;
  return std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end() ||
         std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

}  // namespace mlaserve
