#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

namespace mlaserve {
namespace {

constexpr int kVocab = 100;

// Applies `edit` to valid parameters and returns Validate's message ("" when ok).
std::string ErrorAfter(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams p;
  edit(p);
  const Status s = Validate(p, kVocab);
  return s.ok() ? "" : s.message();
}

TEST(SamplingParams, DefaultsAreValidAndOff) {
  const SamplingParams p;
  EXPECT_TRUE(Validate(p, kVocab).ok());
  EXPECT_TRUE(IsGreedy(p));  // the C++ default; the HTTP layer applies kApiDefaultTemperature
  EXPECT_EQ(p.max_new_tokens, 128);
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_EQ(kApiDefaultTemperature, 1.0f);
}

TEST(SamplingParams, AcceptsTheBoundaries) {
  for (auto edit : std::vector<std::function<void(SamplingParams&)>>{
           [](SamplingParams& p) { p.temperature = 0.0f; },
           [](SamplingParams& p) { p.temperature = 100.0f; },
           [](SamplingParams& p) { p.top_p = 1.0f; },
           [](SamplingParams& p) { p.top_p = 1e-6f; },
           [](SamplingParams& p) { p.top_k = -1; },
           [](SamplingParams& p) { p.top_k = 0; },
           [](SamplingParams& p) { p.top_k = 1; },
           [](SamplingParams& p) { p.top_k = 1000000; },
           [](SamplingParams& p) { p.min_p = 0.0f; },
           [](SamplingParams& p) { p.min_p = 1.0f; },
           [](SamplingParams& p) { p.repetition_penalty = 2.0f; },
           [](SamplingParams& p) { p.repetition_penalty = 0.01f; },
           [](SamplingParams& p) { p.frequency_penalty = -2.0f; },
           [](SamplingParams& p) { p.presence_penalty = 2.0f; },
           [](SamplingParams& p) { p.max_new_tokens = 0; },
           [](SamplingParams& p) { p.min_new_tokens = p.max_new_tokens; },
           [](SamplingParams& p) { p.stop_token_ids = {0, kVocab - 1}; },
           [](SamplingParams& p) { p.stop = std::vector<std::string>(size_t(kMaxStopStrings), "x"); },
           [](SamplingParams& p) { p.top_logprobs_num = kMaxTopLogprobs; },
       }) {
    EXPECT_EQ(ErrorAfter(edit), "");
  }
}

TEST(SamplingParams, MessagesNameTheFieldAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature must be a finite number >= 0 (0 = greedy), got -0.5");
  EXPECT_EQ(ErrorAfter([&](SamplingParams& p) { p.temperature = inf; }),
            "temperature must be a finite number >= 0 (0 = greedy), got inf");
  EXPECT_EQ(ErrorAfter([&](SamplingParams& p) { p.temperature = nan; }).rfind("temperature must", 0), 0u);
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(ErrorAfter([&](SamplingParams& p) { p.top_p = nan; }).rfind("top_p must", 0), 0u);
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_k = -2; }),
            "top_k must be -1 or 0 (all tokens) or at least 1, got -2");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.min_p = 1.5f; }), "min_p must be in [0, 1], got 1.5");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
            "repetition_penalty must be in (0, 2] (1 = off), got 0");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.repetition_penalty = 2.5f; }),
            "repetition_penalty must be in (0, 2] (1 = off), got 2.5");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.frequency_penalty = 2.5f; }),
            "frequency_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.presence_penalty = -3.0f; }),
            "presence_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.max_new_tokens = -1; }), "max_new_tokens must be at least 0, got -1");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.min_new_tokens = -1; }),
            "min_new_tokens must be in [0, max_new_tokens (128)], got -1");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) {
              p.max_new_tokens = 10;
              p.min_new_tokens = 11;
            }),
            "min_new_tokens must be in [0, max_new_tokens (10)], got 11");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.stop_token_ids = {5, kVocab}; }),
            "stop_token_ids[1] must be in [0, 100), got 100");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.stop_token_ids = {-1}; }),
            "stop_token_ids[0] must be in [0, 100), got -1");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.stop = {"a", ""}; }), "stop[1] must not be empty");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); }),
            "stop must hold at most 16 strings, got 17");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_logprobs_num = 21; }),
            "top_logprobs_num must be in [0, 20], got 21");
  EXPECT_EQ(ErrorAfter([](SamplingParams& p) { p.top_logprobs_num = -1; }),
            "top_logprobs_num must be in [0, 20], got -1");
}

TEST(SamplingParams, GreedyAndStopTokens) {
  EXPECT_TRUE(IsGreedy({.temperature = 0.0f}));
  EXPECT_TRUE(IsGreedy({.temperature = 1e-7f}));
  EXPECT_TRUE(IsGreedy({.temperature = 0.7f, .top_k = 1}));
  EXPECT_FALSE(IsGreedy({.temperature = 0.7f}));
  EXPECT_FALSE(IsGreedy({.temperature = 0.7f, .top_k = -1}));

  const std::vector<TokenId> eos{2};
  const SamplingParams p{.stop_token_ids = {7, 9}};
  EXPECT_TRUE(IsStopToken(p, eos, 2));
  EXPECT_TRUE(IsStopToken(p, eos, 9));
  EXPECT_FALSE(IsStopToken(p, eos, 3));
  // SGLang: ignore_eos also ignores stop_token_ids.
  const SamplingParams ignoring{.stop_token_ids = {7, 9}, .ignore_eos = true};
  EXPECT_FALSE(IsStopToken(ignoring, eos, 2));
  EXPECT_FALSE(IsStopToken(ignoring, eos, 9));
}

}  // namespace
}  // namespace mlaserve
