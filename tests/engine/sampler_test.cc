#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace mlaserve {
namespace {

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(5);
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.Sample(logits, SamplingParams{}, 0), 1);
  EXPECT_EQ(s.Sample(logits, SamplingParams{.temperature = 1.0f, .top_k = 1}, 3), 1);
}

TEST(Sampler, SeededDrawsDependOnlyOnSeedAndPosition) {
  Sampler a(4), b(4);
  const std::vector<float> logits{1.0f, 1.0f, 1.0f, 1.0f};
  const SamplingParams p{.temperature = 1.0f, .seed = 42};
  std::vector<TokenId> first, second;
  for (int pos = 0; pos < 50; ++pos) first.push_back(a.Sample(logits, p, pos));
  for (int pos = 49; pos >= 0; --pos) second.insert(second.begin(), b.Sample(logits, p, pos));
  EXPECT_EQ(first, second);  // order of calls does not matter
  std::vector<TokenId> other;
  for (int pos = 0; pos < 50; ++pos) other.push_back(a.Sample(logits, {.temperature = 1.0f, .seed = 43}, pos));
  EXPECT_NE(first, other);
}

TEST(Sampler, FollowsTheDistributionAndTruncates) {
  Sampler s(3);
  const std::vector<float> logits{std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  int counts[3] = {};
  for (int pos = 0; pos < 20000; ++pos) counts[s.Sample(logits, {.temperature = 1.0f, .seed = 1}, pos)]++;
  EXPECT_NEAR(counts[0] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.1, 0.02);
  // top_p 0.7 keeps {0.6, 0.3}; top_k 2 likewise: token 2 never appears.
  for (int pos = 0; pos < 2000; ++pos) {
    EXPECT_NE(s.Sample(logits, {.temperature = 1.0f, .top_p = 0.7f, .seed = 2}, pos), 2);
    EXPECT_NE(s.Sample(logits, {.temperature = 1.0f, .top_k = 2, .seed = 3}, pos), 2);
  }
}

}  // namespace
}  // namespace mlaserve
