// Model::set_timings (bench's attention share and bound): the attention time (and its part over
// the KV cache) accumulates while set, is
// part of the call's own time, and nothing is accumulated once it is unset; the logits do not
// change either way.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/sequence_runner.h"
#include "model/model.h"

namespace mlaserve {
namespace {

TEST(ForwardTimings, AttentionTimeIsAccumulatedOnlyWhileSetAndIsPartOfTheCall) {
  auto model = Model::Load(std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla",
                           ModelOptions{.max_batch_tokens = 64, .max_context = 128});
  ASSERT_TRUE(model.ok()) << model.error();
  auto runner = SequenceRunner::Create(**model, DefaultKernels(), {.kv_format = KvFormat::kBF16});
  ASSERT_TRUE(runner.ok()) << runner.error();
  const std::vector<TokenId> prompt = {2042, 82, 77, 77, 69, 79, 58, 10, 84, 104, 111, 117, 32};

  ASSERT_TRUE((*runner)->Append(prompt).ok());
  const std::vector<float> plain((*runner)->last_logits().begin(), (*runner)->last_logits().end());
  (*runner)->Reset();

  ForwardTimings timings;
  (*model)->set_timings(&timings);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*runner)->Append(prompt).ok());
  const int64_t call_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  (*model)->set_timings(nullptr);
  EXPECT_GT(timings.attention_ns, 0);
  EXPECT_LT(timings.attention_ns, call_ns);
  // Attention over the cache is part of the attention block.
  EXPECT_GT(timings.attention_core_ns, 0);
  EXPECT_LT(timings.attention_core_ns, timings.attention_ns);
  EXPECT_EQ(timings.forward_calls, 1);  // 13 tokens fit one call of 64
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), (*runner)->last_logits().begin()));

  const int64_t before = timings.attention_ns;
  const TokenId next = 32;
  ASSERT_TRUE((*runner)->Append(std::span(&next, 1)).ok());
  EXPECT_EQ(timings.attention_ns, before);
  EXPECT_EQ(timings.forward_calls, 1);

  // A prompt longer than max_batch_tokens takes several calls.
  (*runner)->Reset();
  ForwardTimings chunked;
  (*model)->set_timings(&chunked);
  std::vector<TokenId> long_prompt;
  for (int i = 0; i < 100; ++i) long_prompt.push_back(prompt[size_t(i) % prompt.size()]);
  ASSERT_TRUE((*runner)->Append(long_prompt).ok());
  (*model)->set_timings(nullptr);
  EXPECT_EQ(chunked.forward_calls, 2);  // 64 + 36
}

}  // namespace
}  // namespace mlaserve
