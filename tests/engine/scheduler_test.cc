// The scheduler without a model: the engine runs on FakeModelRunner (tests/support), whose
// scripted logits depend on every token its page tables point at. Admission, chunked prefill,
// retraction, radix reuse and the error path are checked by the plans the runner received and
// by every request's tokens being exactly the script's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/drafter.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "support/fake_model_runner.h"
#include "support/greedy_request.h"

namespace mlaserve {
namespace {

using testing::FakeModelRunner;
using Executed = FakeModelRunner::ExecutedSequence;

constexpr int kVocab = 97;

std::vector<TokenId> Prompt(int len, uint64_t seed) {
  std::vector<TokenId> p;
  for (int i = 0; i < len; ++i) p.push_back(TokenId(CounterUniform(seed, uint64_t(i)) * kVocab));
  return p;
}

using testing::Greedy;

EngineOptions Options(int max_running_requests = 256, int chunked_prefill_size = 2048,
                      double schedule_conservativeness = 1.0) {
  EngineOptions o;
  o.max_running_requests = max_running_requests;
  o.chunked_prefill_size = chunked_prefill_size;
  o.schedule_conservativeness = schedule_conservativeness;
  o.log_batches = false;
  return o;
}

// A page allocator (only the page bookkeeping matters: the fake runner keeps no KV bytes), the
// fake runner, an engine, and what each request received.
class Harness {
 public:
  explicit Harness(int64_t pool_tokens, const EngineOptions& options, int max_batch_tokens = 256)
      : pool_(MakePool(pool_tokens)),
        runner_(*pool_, kVocab, max_batch_tokens, /*max_context=*/512),
        engine_(runner_, *pool_, options) {}

  void Submit(GenerateRequest request) {
    prompts_[request.rid] = request.input_ids;
    max_new_[request.rid] = request.sampling.max_new_tokens;
    ASSERT_TRUE(engine_.Submit(std::move(request), [this](const OutputView& out) {
      const std::string rid(out.rid);
      auto& t = tokens_[rid];
      t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      auto& lp = input_logprobs_[rid];
      lp.insert(lp.end(), out.input_token_logprobs.begin(), out.input_token_logprobs.end());
      if (out.finished) {
        ++finished_chunks_[rid];
        last_[rid].Assign(out);
      }
    }).ok());
  }
  void RunToEnd() {
    for (int steps = 0; engine_.Step();) ASSERT_LT(++steps, 100000);
  }
  // Every submitted request finished once, with exactly the script's tokens.
  void ExpectScriptedOutputs() {
    for (const auto& [rid, prompt] : prompts_) {
      EXPECT_EQ(finished_chunks_[rid], 1) << rid;
      EXPECT_EQ(last_[rid].finish_reason, FinishReason::kLength) << rid;
      EXPECT_EQ(tokens_[rid], runner_.Greedy(prompt, max_new_[rid])) << rid;
    }
  }

  PageAllocator& pool() { return *pool_; }
  FakeModelRunner& runner() { return runner_; }
  Engine& engine() { return engine_; }
  const RequestOutput& last(const std::string& rid) { return last_[rid]; }
  const std::vector<TokenId>& tokens(const std::string& rid) { return tokens_[rid]; }
  // Prompt logprobs, from whichever chunk carried them.
  const std::vector<float>& input_logprobs(const std::string& rid) { return input_logprobs_[rid]; }

 private:
  static std::unique_ptr<PageAllocator> MakePool(int64_t tokens) {
    auto p = PageAllocator::Create(16, tokens / 16);
    EXPECT_TRUE(p.ok()) << p.error();
    return std::move(p).value();
  }

  std::unique_ptr<PageAllocator> pool_;
  FakeModelRunner runner_;
  Engine engine_;
  std::map<std::string, std::vector<TokenId>> prompts_, tokens_;
  std::map<std::string, int> max_new_, finished_chunks_;
  std::map<std::string, RequestOutput> last_;
  std::map<std::string, std::vector<float>> input_logprobs_;
};

TEST(Scheduler, AdmitsNoMoreThanMaxRunningRequests) {
  Harness h(4096, Options(/*max_running_requests=*/2));
  for (int i = 0; i < 5; ++i) h.Submit(Greedy("r" + std::to_string(i), Prompt(20 + i, uint64_t(i)), 10));
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  ASSERT_FALSE(h.runner().steps().empty());
  EXPECT_EQ(h.runner().steps()[0].size(), 2u);
  for (const auto& step : h.runner().steps()) EXPECT_LE(step.size(), 2u);
  EXPECT_EQ(h.engine().stats().max_running_reqs_seen, 2);
}

TEST(Scheduler, AdmitsOnlyWhatTheKvBudgetHoldsWithItsFutureTokens) {
  // 4 pages of 16. Each request needs its 20 prompt tokens plus 0.7 x 20 future ones (34): once
  // the first runs, the second does not fit until the first has finished.
  Harness h(64, Options());
  h.Submit(Greedy("a", Prompt(20, 1), 20));
  h.Submit(Greedy("b", Prompt(20, 2), 20));
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  for (const auto& step : h.runner().steps()) EXPECT_EQ(step.size(), 1u);
  EXPECT_EQ(h.engine().stats().num_retracted_requests_total, 0);
}

TEST(Scheduler, ChunkedPrefillGrantsTheTokenBudgetChunkByChunk) {
  Harness h(4096, Options(256, /*chunked_prefill_size=*/16));
  h.Submit(Greedy("long", Prompt(50, 3), 3));
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  // Prefill chunks and decode steps are one path: positions computed, tokens granted.
  const std::vector<std::pair<int, int>> expected = {{0, 16}, {16, 16}, {32, 16}, {48, 2}, {50, 1}, {51, 1}};
  ASSERT_EQ(h.runner().steps().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(h.runner().steps()[i].size(), 1u);
    EXPECT_EQ(h.runner().steps()[i][0].num_computed_tokens, expected[i].first) << i;
    EXPECT_EQ(h.runner().steps()[i][0].num_new_tokens, expected[i].second) << i;
  }

  // A decoding request and a chunked prefill share a step: the decode first, then a full chunk.
  Harness mixed(4096, Options(256, 16));
  mixed.Submit(Greedy("decoding", Prompt(10, 4), 8));
  ASSERT_TRUE(mixed.engine().Step());
  mixed.Submit(Greedy("prefilling", Prompt(40, 5), 4));
  ASSERT_TRUE(mixed.engine().Step());
  mixed.RunToEnd();
  mixed.ExpectScriptedOutputs();
  const auto& second = mixed.runner().steps()[1];
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].num_computed_tokens, 10);
  EXPECT_EQ(second[0].num_new_tokens, 1);
  EXPECT_EQ(second[1].num_computed_tokens, 0);
  EXPECT_EQ(second[1].num_new_tokens, 16);
}

TEST(Scheduler, RetractsWhenDecodeRunsOutOfPagesAndRecomputesExactly) {
  // 16 pages; a low conservativeness over-admits, so decode runs out of pages.
  Harness h(256, Options(256, 2048, /*schedule_conservativeness=*/0.2));
  for (int i = 0; i < 16; ++i) {
    h.Submit(Greedy("r" + std::to_string(i), Prompt(30 + (i * 7) % 30, uint64_t(100 + i % 3)), 40 + (i * 5) % 20));
  }
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  const EngineStatsSnapshot s = h.engine().stats();
  EXPECT_GT(s.num_retracted_requests_total, 0);
  EXPECT_EQ(s.num_requests_total, 16);
  EXPECT_EQ(s.num_running_reqs, 0);
  // Nothing leaked: once the prefix cache is flushed every page is free.
  ASSERT_TRUE(h.engine().FlushCache().ok());
  EXPECT_EQ(h.pool().num_free_pages(), h.pool().num_pages());
}

TEST(Scheduler, RadixCacheLendsMatchedPagesAndTheOutputIsUnchanged) {
  Harness h(4096, Options());
  const std::vector<TokenId> prompt = Prompt(100, 7);
  h.Submit(Greedy("a", prompt, 20));
  h.RunToEnd();
  // The same prompt: whole pages of the 99 tokens before the last are lent, 4 tokens run.
  size_t first = h.runner().steps().size();
  h.Submit(Greedy("b", prompt, 20));
  h.RunToEnd();
  EXPECT_EQ(h.last("b").cached_tokens, 96);
  EXPECT_EQ(h.runner().steps()[first][0].num_computed_tokens, 96);
  EXPECT_EQ(h.runner().steps()[first][0].num_new_tokens, 4);
  // A prompt sharing 40 tokens reuses two whole pages.
  std::vector<TokenId> shared(prompt.begin(), prompt.begin() + 40);
  for (TokenId t : Prompt(30, 8)) shared.push_back(t);
  first = h.runner().steps().size();
  h.Submit(Greedy("c", shared, 10));
  h.RunToEnd();
  EXPECT_EQ(h.runner().steps()[first][0].num_computed_tokens, 32);
  EXPECT_EQ(h.runner().steps()[first][0].num_new_tokens, 38);
  // A follow-up turn (prompt + a's answer) reuses the pages a's output filled: a computed 119
  // positions, 7 whole pages.
  std::vector<TokenId> follow_up = prompt;
  const std::vector<TokenId> answer = h.runner().Greedy(prompt, 20);
  follow_up.insert(follow_up.end(), answer.begin(), answer.end());
  first = h.runner().steps().size();
  h.Submit(Greedy("d", follow_up, 5));
  h.RunToEnd();
  EXPECT_EQ(h.runner().steps()[first][0].num_computed_tokens, 112);
  EXPECT_EQ(h.last("d").cached_tokens, 112);
  h.ExpectScriptedOutputs();
}

TEST(Scheduler, LongestPrefixMatchAdmitsTheCachedPromptFirst) {
  for (const SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kLpm}) {
    EngineOptions o = Options(/*max_running_requests=*/1);
    o.schedule_policy = policy;
    Harness h(4096, o);
    const std::vector<TokenId> cached = Prompt(100, 12);
    h.Submit(Greedy("warm", cached, 2));
    h.RunToEnd();
    const size_t first = h.runner().steps().size();
    h.Submit(Greedy("fresh", Prompt(50, 13), 2));
    h.Submit(Greedy("cached", cached, 2));
    h.RunToEnd();
    h.ExpectScriptedOutputs();
    // fcfs runs "fresh" first (nothing computed); lpm the one with 96 cached tokens.
    EXPECT_EQ(h.runner().steps()[first][0].num_computed_tokens, policy == SchedulePolicy::kLpm ? 96 : 0);
    EXPECT_EQ(h.last("cached").cached_tokens, 96);
  }
}

TEST(Scheduler, PromptLogprobsGetARowPerPromptTokenAndBypassTheCache) {
  Harness h(4096, Options());
  const std::vector<TokenId> prompt = Prompt(100, 9);
  h.Submit(Greedy("warm", prompt, 2));
  h.RunToEnd();
  GenerateRequest r = Greedy("logprobs", prompt, 2);
  r.logprob_start_len = 0;
  const size_t first = h.runner().steps().size();
  h.Submit(std::move(r));
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  // Not served from the cache, and at most 64 rows of prompt logits per step.
  const auto& steps = h.runner().steps();
  ASSERT_GE(steps.size(), first + 3);
  EXPECT_EQ(steps[first][0].num_computed_tokens, 0);
  EXPECT_EQ(steps[first][0].num_new_tokens, 64);
  EXPECT_TRUE(steps[first][0].all_logits);
  EXPECT_EQ(steps[first + 1][0].num_computed_tokens, 64);
  EXPECT_EQ(steps[first + 1][0].num_new_tokens, 36);
  EXPECT_TRUE(steps[first + 1][0].all_logits);
  EXPECT_FALSE(steps[first + 2][0].all_logits);  // the decode
  const std::vector<float>& logprobs = h.input_logprobs("logprobs");
  ASSERT_EQ(logprobs.size(), prompt.size());
  EXPECT_TRUE(std::isnan(logprobs[0]));
  // One-hot logits: a prompt token the script predicts costs almost nothing, any other ~10 nats.
  std::vector<TokenId> context;
  for (size_t p = 1; p < prompt.size(); ++p) {
    context.assign(prompt.begin(), prompt.begin() + int64_t(p));
    const bool predicted = FakeModelRunner::NextToken(context, kVocab) == prompt[p];
    EXPECT_EQ(logprobs[p] > -1.0f, predicted) << p;
  }
}

TEST(Scheduler, AFailedExecuteAbortsItsBatchAndLeavesNoPagesBehind) {
  Harness h(1024, Options());
  const int64_t free_at_start = h.pool().num_free_pages();
  h.Submit(Greedy("x", Prompt(40, 10), 5));
  h.Submit(Greedy("y", Prompt(20, 11), 5));
  h.runner().FailNextExecute();
  ASSERT_TRUE(h.engine().Step());
  EXPECT_EQ(h.last("x").finish_reason, FinishReason::kAbort);
  EXPECT_EQ(h.last("y").finish_reason, FinishReason::kAbort);
  EXPECT_NE(h.last("x").error.find("internal error"), std::string::npos) << h.last("x").error;
  EXPECT_FALSE(h.engine().Step());
  EXPECT_EQ(h.pool().num_free_pages(), free_at_start);  // nothing was computed, nothing cached
  EXPECT_TRUE(h.engine().idle());
  // The engine goes on: the same prompt now runs from scratch.
  Harness again(1024, Options());
  again.Submit(Greedy("x", Prompt(40, 10), 5));
  again.RunToEnd();
  again.ExpectScriptedOutputs();
}

// Drafts what the script produces next, except that the third draft is always wrong: a verify
// step with three or more drafts accepts exactly two.
class ScriptDrafter final : public Drafter {
 public:
  int Propose(const Request& r, std::span<TokenId> draft) override {
    context_.assign(r.tokens.begin(), r.tokens.end());  // a test drafter may allocate
    for (size_t i = 0; i < draft.size(); ++i) {
      const TokenId next = FakeModelRunner::NextToken(context_, kVocab);
      draft[i] = i == 2 ? (next + 1) % kVocab : next;
      context_.push_back(draft[i]);
    }
    return int(draft.size());
  }

 private:
  std::vector<TokenId> context_;
};

TEST(Scheduler, DraftsFitTheBudgetAndRejectedRowsNeverReachTheCache) {
  ScriptDrafter drafter;
  EngineOptions o = Options();
  o.drafter = &drafter;
  o.num_draft_tokens = 4;
  // 24 tokens a step for 8 decoding requests: not every one gets its 4 drafts.
  Harness h(2048, o, /*max_batch_tokens=*/24);
  for (int i = 0; i < 8; ++i) h.Submit(Greedy("r" + std::to_string(i), Prompt(12 + i, uint64_t(200 + i)), 30 + 3 * i));
  h.RunToEnd();
  // The fake's logits read every row its page tables point at: a dead draft row left in place
  // would change the next tokens.
  h.ExpectScriptedOutputs();
  bool saw_full_verify = false;
  for (const auto& step : h.runner().steps()) {
    int tokens = 0;
    for (const Executed& s : step) {
      tokens += s.num_new_tokens;
      saw_full_verify |= s.num_new_tokens == 5 && s.all_logits;
    }
    EXPECT_LE(tokens, 24);
  }
  EXPECT_TRUE(saw_full_verify);
  const EngineStatsSnapshot s = h.engine().stats();
  EXPECT_GT(s.spec_accepted_tokens_total, s.spec_verify_steps_total);  // mostly two per step
  EXPECT_LE(s.spec_accepted_tokens_total, 2 * s.spec_verify_steps_total);
  // A prompt that continues r0's output is served from r0's cached pages, which must hold only
  // verified rows.
  std::vector<TokenId> continued = Prompt(12, 200);
  const std::vector<TokenId> r0 = h.runner().Greedy(continued, 30);
  continued.insert(continued.end(), r0.begin(), r0.end());
  h.Submit(Greedy("continued", continued, 20));
  h.RunToEnd();
  h.ExpectScriptedOutputs();
  EXPECT_EQ(h.last("continued").cached_tokens, 32);
  ASSERT_TRUE(h.engine().FlushCache().ok());
  EXPECT_EQ(h.pool().num_free_pages(), h.pool().num_pages());

  // Requests that stop on a token inside a verified run, their later drafts computed too (a run
  // appends outputs 3m+1, 3m+2 and the bonus 3m+3; output 18 is a bonus whose row, position 30,
  // holds the rejected draft, and the drafts fill rows up to 31: a whole page). What each leaves
  // in the prefix cache is the whole pages of its history but the last token, as without drafts.
  Harness stops(2048, o);
  for (int i = 0; i < 6; ++i) {
    const std::string rid = "stop" + std::to_string(i);
    const std::vector<TokenId> prompt = Prompt(12, uint64_t(300 + i));
    const std::vector<TokenId> script = stops.runner().Greedy(prompt, 40);
    GenerateRequest r = Greedy(rid, prompt, 40);
    r.sampling.ignore_eos = false;
    r.sampling.stop_token_ids = {script[size_t(15 + i)]};
    stops.Submit(std::move(r));
    stops.RunToEnd();
    const std::vector<TokenId>& out = stops.tokens(rid);
    EXPECT_EQ(stops.last(rid).finish_reason, FinishReason::kStop) << rid;
    ASSERT_LE(out.size(), script.size());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), script.begin())) << rid;
    const Result<FlushCacheResult> flushed = stops.engine().FlushCache();
    ASSERT_TRUE(flushed.ok());
    const int64_t history = int64_t(prompt.size() + out.size());
    EXPECT_EQ(flushed->freed_tokens, (history - 1) / 16 * 16) << rid;
    EXPECT_EQ(stops.pool().num_free_pages(), stops.pool().num_pages()) << rid;
  }
  EXPECT_GT(stops.engine().stats().spec_verify_steps_total, 0);
}

}  // namespace
}  // namespace mlaserve
