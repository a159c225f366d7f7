#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mlaserve {
namespace {

std::vector<float> TestLogits(int vocab) {
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) logits[size_t(i)] = float(std::sin(i * 1.7) * 4.0 + (i % 5) * 0.3);
  return logits;
}

TEST(Logprobs, SumToOneAndTopNIsOrdered) {
  const std::vector<float> logits = TestLogits(300);
  for (float temperature : {1.0f, 0.5f, 3.0f}) {
    LogprobResult r;
    ComputeLogprobs(logits, temperature, 17, int(logits.size()), r);
    ASSERT_EQ(r.top.size(), logits.size());
    double mass = 0.0;
    for (const TokenLogprob& t : r.top) mass += std::exp(double(t.logprob));
    EXPECT_NEAR(mass, 1.0, 1e-5) << temperature;
    for (size_t i = 1; i < r.top.size(); ++i) EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
    for (const TokenLogprob& t : r.top) {
      if (t.token == 17) {
        EXPECT_FLOAT_EQ(t.logprob, r.chosen.logprob);
      }
    }
    EXPECT_EQ(r.chosen.token, 17);
  }
}

TEST(Logprobs, TopNMatchesAFullSort) {
  const std::vector<float> logits = TestLogits(1000);
  LogprobResult all, top5;
  ComputeLogprobs(logits, 1.0f, 0, 1000, all);
  ComputeLogprobs(logits, 1.0f, 0, 5, top5);
  ASSERT_EQ(top5.top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(top5.top[i].token, all.top[i].token);
    EXPECT_FLOAT_EQ(top5.top[i].logprob, all.top[i].logprob);
  }
  // Reusing the result shrinks it; top_n 0 gives none; top_n past the vocabulary is clamped.
  ComputeLogprobs(logits, 1.0f, 3, 0, top5);
  EXPECT_TRUE(top5.top.empty());
  ComputeLogprobs(std::vector<float>{0.0f, 1.0f}, 1.0f, 0, 20, top5);
  EXPECT_EQ(top5.top.size(), 2u);
}

TEST(Logprobs, TiesByLowerIdAndMaskedTokensAreMinusInf) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits{1.0f, 2.0f, -inf, 2.0f, 1.0f};
  LogprobResult r;
  ComputeLogprobs(logits, 1.0f, 2, 5, r);
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_EQ(r.top[2].token, 0);
  EXPECT_EQ(r.top[3].token, 4);
  EXPECT_EQ(r.top[4].token, 2);
  EXPECT_TRUE(std::isinf(r.chosen.logprob) && r.chosen.logprob < 0);
  const double z = std::log(2 * std::exp(1.0) + 2 * std::exp(2.0));
  EXPECT_NEAR(r.top[0].logprob, 2.0 - z, 1e-6);
}

TEST(Logprobs, LogSumExpIsStable) {
  EXPECT_NEAR(LogSumExp(std::vector<float>{1000.0f, 1000.0f}), 1000.0 + std::log(2.0), 1e-9);
  EXPECT_NEAR(LogSumExp(std::vector<float>{-1000.0f, -1000.0f}), -1000.0 + std::log(2.0), 1e-9);
  EXPECT_NEAR(LogSumExp(std::vector<float>{2.0f, 4.0f}, 2.0f), std::log(std::exp(1.0) + std::exp(2.0)), 1e-6);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(LogSumExp(std::vector<float>{-inf, -inf}), -inf);
}

}  // namespace
}  // namespace mlaserve
