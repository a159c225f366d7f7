// Speculative step tuning (engine/draft_step_tuner.h): from synthetic step timings, the tuner
// measures every cap from k down to 0, holds the fastest, and measures again after the hold.
#include "engine/draft_step_tuner.h"

#include <gtest/gtest.h>

namespace mlaserve {
namespace {

// A step at cap c appends `tokens[c]` tokens in `ns[c]` nanoseconds.
void RunWindow(DraftStepTuner& t, int steps, const int64_t* tokens, const int64_t* ns, bool* ended) {
  for (int i = 0; i < steps; ++i) *ended = t.Record(tokens[t.cap()], ns[t.cap()]) || *ended;
}

TEST(DraftStepTuner, MeasuresEveryCapHoldsTheFastestAndMeasuresAgain) {
  DraftStepTuner t(3, /*window_steps=*/4, /*hold_steps=*/10);
  EXPECT_EQ(t.cap(), 3);  // measuring starts at k
  // Cap 0 (plain): 1 token in 0.8 ms (1250 tok/s); 1: 2 in 1 ms (2000); 2: 2.5 in 1.5 ms
  // (1667); 3: 3 in 2 ms (1500).
  const int64_t tokens[] = {1, 2, 5, 3}, ns[] = {800'000, 1'000'000, 3'000'000, 2'000'000};
  bool ended = false;
  RunWindow(t, 4, tokens, ns, &ended);
  EXPECT_EQ(t.cap(), 2);
  RunWindow(t, 4, tokens, ns, &ended);
  EXPECT_EQ(t.cap(), 1);
  RunWindow(t, 4, tokens, ns, &ended);
  EXPECT_EQ(t.cap(), 0);
  EXPECT_FALSE(ended);
  RunWindow(t, 4, tokens, ns, &ended);
  EXPECT_TRUE(ended);
  EXPECT_EQ(t.cap(), 1);  // the fastest
  EXPECT_NEAR(t.rates()[0], 1250.0, 1e-9);
  EXPECT_NEAR(t.rates()[1], 2000.0, 1e-9);
  EXPECT_NEAR(t.rates()[2], 5.0 / 3.0 * 1000.0, 1e-9);
  EXPECT_NEAR(t.rates()[3], 1500.0, 1e-9);
  // Held for 10 steps, then measured again from k.
  ended = false;
  RunWindow(t, 9, tokens, ns, &ended);
  EXPECT_EQ(t.cap(), 1);
  RunWindow(t, 1, tokens, ns, &ended);
  EXPECT_EQ(t.cap(), 3);
  EXPECT_FALSE(ended);
}

TEST(DraftStepTuner, ATieKeepsTheFewerDrafts) {
  DraftStepTuner t(2, 1, 5);
  EXPECT_FALSE(t.Record(4, 2'000'000));  // cap 2: 2000 tok/s
  EXPECT_FALSE(t.Record(2, 1'000'000));  // cap 1: 2000 tok/s
  EXPECT_TRUE(t.Record(1, 1'000'000));   // cap 0: 1000 tok/s
  EXPECT_EQ(t.cap(), 1);
}

TEST(DraftStepTuner, DraftsThatDoNotPayAreTurnedOff) {
  DraftStepTuner t(1, 2, 5);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(t.Record(1, 1'500'000));  // cap 1: nothing accepted, slower
  EXPECT_FALSE(t.Record(1, 1'000'000));
  EXPECT_TRUE(t.Record(1, 1'000'000));  // cap 0: plain decoding
  EXPECT_EQ(t.cap(), 0);
}

}  // namespace
}  // namespace mlaserve
