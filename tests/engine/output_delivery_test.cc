// Token delivery allocates nothing in steady state: OutputProcessor::Deliver hands a view of the
// request's buffers to the callback, and the server's OutputChannel copies it into reused slots
// that the consumer swaps out. Counted with a replacement operator new for this test binary;
// it counts only on a thread that has switched counting on, so the other tests only pay a
// thread-local check.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/output_processor.h"
#include "server/output_channel.h"
#include "support/fake_model_runner.h"
#include "support/greedy_request.h"

namespace {
thread_local bool t_counting = false;
thread_local long t_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// GCC sees std::free meet memory from operator new once these are inlined and warns; here the
// operator new above is the malloc behind that memory, so the pairing is right.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's buffer): replacing only some would pair the
// library's operator new with the free above, which AddressSanitizer reports as a mismatch.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (t_counting) ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace mlaserve {
namespace {

// Allocations made on this thread while it lives.
class AllocationCounter {
 public:
  AllocationCounter() {
    t_allocations = 0;
    t_counting = true;
  }
  ~AllocationCounter() { t_counting = false; }
  long count() const { return t_allocations; }
};

constexpr int kMaxNewTokens = 64;

// A decoding request as the engine holds it, delivering into `channel`.
Request DecodingRequest(OutputChannel& channel) {
  Request r;
  r.spec.rid = "a-request-id-too-long-for-the-small-string-buffer";
  r.spec.input_ids = {5, 6, 7};
  r.spec.sampling.max_new_tokens = kMaxNewTokens;
  r.spec.sampling.return_logprob = true;
  r.tokens = r.spec.input_ids;
  r.tokens.reserve(r.spec.input_ids.size() + kMaxNewTokens);
  r.callback = [&channel](const OutputView& o) { channel.Push(0, o); };
  r.submit_time = Clock::Real().Now();
  return r;
}

// One decode step's bookkeeping, as AfterToken leaves it: a token, its logprob, its text (longer
// than a small string, so a text buffer that did not keep its capacity would allocate).
void SampleToken(Request& r, TokenId token) {
  r.tokens.push_back(token);
  r.pending_logprobs.push_back(-0.5f);
  r.pending_text.append("a piece of text longer than sso");
}

TEST(OutputDeliveryTest, TheCounterSeesAllocations) {
  AllocationCounter counter;
  std::vector<TokenId> grown;
  grown.push_back(1);
  EXPECT_EQ(counter.count(), 1);
}

TEST(OutputDeliveryTest, SteadyStateDecodeDeliveryAllocatesNothing) {
  OutputProcessor processor(ModelRunnerInfo{.vocab_size = 16, .max_context = 128}, nullptr);
  OutputChannel channel;
  Request r = DecodingRequest(channel);
  OutputChannel::Item item;
  // Warm-up: the channel's ring (4 slots) and the consumer's item are five buffers that take turns;
  // each grows on its first chunk.
  TokenId token = 0;
  for (; token < 8; ++token) {
    SampleToken(r, token);
    processor.Deliver(r, /*finished=*/false);
    ASSERT_TRUE(channel.Pop(item, std::chrono::milliseconds(0)));
  }
  long allocations = 0;
  for (; token < kMaxNewTokens - 1; ++token) {
    AllocationCounter counter;
    SampleToken(r, token);
    processor.Deliver(r, /*finished=*/false);
    const bool popped = channel.Pop(item, std::chrono::milliseconds(0));
    allocations += counter.count();
    ASSERT_TRUE(popped);
    // What the consumer holds is this chunk's, copied out of the engine's buffers.
    ASSERT_EQ(item.output.new_token_ids, std::vector<TokenId>{token});
    ASSERT_EQ(item.output.new_token_logprobs, std::vector<float>{-0.5f});
    ASSERT_EQ(item.output.new_text, "a piece of text longer than sso");
    ASSERT_EQ(item.output.rid, r.spec.rid);
    ASSERT_EQ(item.output.completion_tokens, token + 1);
  }
  EXPECT_EQ(allocations, 0);
  // Delivered buffers are emptied for the next chunk; the token history is the request's own.
  EXPECT_TRUE(r.pending_logprobs.empty());
  EXPECT_TRUE(r.pending_text.empty());
  EXPECT_EQ(r.num_streamed, kMaxNewTokens - 1);
  EXPECT_EQ(channel.capacity(), 4u);
}

TEST(OutputDeliveryTest, ChannelGrowsOnlyWhileOutputsBackUpAndKeepsTheirOrder) {
  OutputChannel channel;
  std::vector<TokenId> one(1);
  OutputView view;
  view.new_token_ids = one;
  OutputChannel::Item item;
  for (int round = 0; round < 100; ++round) {
    one[0] = round;
    channel.Push(size_t(round % 3), view);
    ASSERT_TRUE(channel.Pop(item, std::chrono::milliseconds(0)));
    ASSERT_EQ(item.output.new_token_ids, std::vector<TokenId>{round});
  }
  EXPECT_EQ(channel.capacity(), 4u);
  // A consumer that falls behind: the ring doubles, queued outputs first, in order.
  for (int i = 0; i < 11; ++i) {
    one[0] = 1000 + i;
    channel.Push(size_t(i), view);
  }
  EXPECT_EQ(channel.capacity(), 16u);
  for (int i = 0; i < 11; ++i) {
    ASSERT_TRUE(channel.Pop(item, std::chrono::milliseconds(0)));
    EXPECT_EQ(item.index, size_t(i));
    EXPECT_EQ(item.output.new_token_ids, std::vector<TokenId>{1000 + i});
  }
  EXPECT_FALSE(channel.Pop(item, std::chrono::milliseconds(0)));
}

// Through the engine: every chunk's tokens are a view of one token history, reserved for prompt +
// max_new_tokens at Submit, so the history never moves (a reallocation would show as a new base
// address) and the view is valid, and exactly the new tokens, during each call.
TEST(OutputDeliveryTest, EngineChunksViewOneHistoryThatNeverMoves) {
  auto pool = PageAllocator::Create(16, 64);
  ASSERT_TRUE(pool.ok()) << pool.error();
  testing::FakeModelRunner runner(**pool, /*vocab_size=*/97, /*max_batch_tokens=*/256, /*max_context=*/512);
  EngineOptions options;
  options.log_batches = false;
  Engine engine(runner, **pool, options);
  std::vector<const TokenId*> bases;
  std::vector<TokenId> received;
  int chunks = 0;
  bool finished = false;
  ASSERT_TRUE(engine.Submit(testing::Greedy("r", {1, 2, 3, 4, 5}, 100), [&](const OutputView& o) {
    ++chunks;
    finished = o.finished;
    if (o.new_token_ids.empty()) return;
    // The history starts prompt_tokens + the tokens delivered before this chunk earlier.
    const size_t delivered_before = size_t(o.completion_tokens) - o.new_token_ids.size();
    bases.push_back(o.new_token_ids.data() - delivered_before - size_t(o.prompt_tokens));
    received.insert(received.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  }).ok());
  while (engine.Step()) {
  }
  ASSERT_TRUE(finished);
  EXPECT_EQ(received.size(), 100u);
  EXPECT_GE(chunks, 100);
  ASSERT_FALSE(bases.empty());
  for (const TokenId* base : bases) EXPECT_EQ(base, bases.front());
}

}  // namespace
}  // namespace mlaserve
