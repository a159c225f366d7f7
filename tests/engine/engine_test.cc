// The engine against single-sequence runs: many requests of mixed lengths, more than the KV
// pool holds, chunked prefill, prefix caching and retraction must all give every request
// exactly the greedy tokens it gets alone (bf16 cache), exactly once. The model runs in
// deterministic mode: chunked prefill gives bit-identical logits only there.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <map>
#include <mutex>

#include "engine/cpu_model_runner.h"
#include "engine/drafter.h"
#include "engine/model_drafter.h"
#include "model/eagle3_draft.h"
#include "model/mtp_draft.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "support/greedy_request.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

constexpr auto Prompt = testing::RandomPrompt;

const std::string kModel = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla";

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(kModel, ModelOptions{.max_batch_tokens = 256, .max_context = 512, .deterministic = true});
    ASSERT_TRUE(m.ok()) << m.error();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }

  // The engine's page ids (pool->...: the allocator) and the runner's bytes for them.
  struct Kv {
    std::unique_ptr<PageAllocator> allocator;
    std::unique_ptr<HostKvStorage> storage;
    PageAllocator* operator->() { return allocator.get(); }
  };
  Kv Pool(int64_t tokens, int page_size = 16) {
    const ModelConfig& c = model_->config();
    auto storage = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = c.num_hidden_layers,
                                          .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                                          .page_size = page_size, .num_pages = tokens / page_size});
    auto allocator = PageAllocator::Create(page_size, tokens / page_size);
    EXPECT_TRUE(storage.ok() && allocator.ok());
    return Kv{.allocator = std::move(allocator).value(), .storage = std::move(storage).value()};
  }

  // Greedy tokens for a prompt, run alone.
  std::vector<TokenId> Solo(const std::vector<TokenId>& prompt, int max_new) {
    auto runner = SequenceRunner::Create(*model_, DefaultKernels(), {.kv_format = KvFormat::kBF16});
    EXPECT_TRUE(runner.ok());
    std::vector<TokenId> out;
    EXPECT_TRUE((*runner)->Append(prompt).ok());
    for (int i = 0; i < max_new; ++i) {
      const TokenId t = ArgMax((*runner)->last_logits());
      out.push_back(t);
      if (i + 1 < max_new) {
        EXPECT_TRUE((*runner)->Append(std::span(&t, 1)).ok());
      }
    }
    return out;
  }

  // Default options without the batch log lines.
  static EngineOptions Quiet() {
    EngineOptions o;
    o.log_batches = false;
    return o;
  }

  static Model* model_;
};
Model* EngineTest::model_ = nullptr;

struct Collected {
  std::map<std::string, std::vector<TokenId>> tokens;
  std::map<std::string, int> finished_chunks;
  std::map<std::string, RequestOutput> last;
};

OutputCallback Collect(Collected& c) {
  return [&c](const OutputView& out) {
    const std::string rid(out.rid);
    auto& t = c.tokens[rid];
    t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    if (out.finished) {
      c.finished_chunks[rid]++;
      c.last[rid].Assign(out);
    }
  };
}

// Counts finished requests of an engine running its own thread; WaitFor blocks until n have.
class FinishedCounter {
 public:
  OutputCallback Callback() {
    return [this](const OutputView& out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu_);
      ++finished_;
      cv_.notify_all();
    };
  }
  [[nodiscard]] bool WaitFor(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return finished_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int finished_ = 0;
};

using testing::Greedy;

TEST_F(EngineTest, BatchOfMixedLengthsMatchesSoloRunsWithRetraction) {
  // 64 requests; the pool holds a handful at once, and a low conservativeness makes the
  // scheduler over-admit, so decode runs out of pages and must retract.
  auto pool = Pool(1024);
  EngineOptions o;
  o.chunked_prefill_size = 48;  // longer prompts are chunked
  o.schedule_conservativeness = 0.2;
  o.log_batches = false;
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, o);
  Collected got;
  std::map<std::string, std::vector<TokenId>> expected;
  for (int i = 0; i < 64; ++i) {
    const int len = 34 + (i * 37) % 90, max_new = 40 + (i * 13) % 60;
    const std::string rid = "r" + std::to_string(i);
    // Even requests share a long prefix (same seed), so the prefix cache has work.
    auto prompt = Prompt(len, i % 2 == 0 ? 1000 : uint64_t(i));
    expected[rid] = i % 4 == 0 ? Solo(prompt, max_new) : std::vector<TokenId>{};
    ASSERT_TRUE(engine.Submit(Greedy(rid, prompt, max_new), Collect(got)).ok());
  }
  int steps = 0;
  while (engine.Step()) ASSERT_LT(++steps, 100000);
  ASSERT_EQ(got.finished_chunks.size(), 64u);
  for (auto& [rid, count] : got.finished_chunks) EXPECT_EQ(count, 1) << rid;
  for (auto& [rid, tokens] : expected) {
    const RequestOutput& last = got.last[rid];
    EXPECT_EQ(last.finish_reason, FinishReason::kLength) << rid;
    EXPECT_EQ(int(got.tokens[rid].size()), last.completion_tokens) << rid;
    if (!tokens.empty()) {
      EXPECT_EQ(got.tokens[rid], tokens) << rid;
    }
  }
  const EngineStatsSnapshot s = engine.stats();
  EXPECT_GT(s.num_retracted_requests_total, 0);
  EXPECT_EQ(s.num_requests_total, 64);
  EXPECT_EQ(s.num_aborted_requests_total, 0);
  EXPECT_GT(s.cached_tokens_total, 0);
  EXPECT_EQ(s.num_running_reqs, 0);
  EXPECT_EQ(s.num_queue_reqs, 0);
  EXPECT_TRUE(engine.idle());
}

TEST_F(EngineTest, SeededSamplingIsTheSameAloneAndInABusyBatch) {
  auto sampled = [](std::string rid, std::vector<TokenId> prompt) {
    GenerateRequest r = Greedy(std::move(rid), std::move(prompt), 40);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1234;
    r.sampling.return_logprob = true;
    r.sampling.top_logprobs_num = 3;
    return r;
  };
  const auto prompt = Prompt(30, 99);
  Collected alone, busy;
  {
    auto pool = Pool(2048);
    EngineOptions o;
    o.log_batches = false;
    CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
    Engine engine(runner, *pool.allocator, o);
    ASSERT_TRUE(engine.Submit(sampled("s", prompt), Collect(alone)).ok());
    while (engine.Step()) {
    }
  }
  {
    // A small pool and many neighbours: the seeded request is batched, maybe retracted.
    auto pool = Pool(512);
    EngineOptions o;
    o.log_batches = false;
    o.schedule_conservativeness = 0.2;
    CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
    Engine engine(runner, *pool.allocator, o);
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(engine.Submit(Greedy("n" + std::to_string(i), Prompt(20 + i, uint64_t(i)), 60), Collect(busy)).ok());
    }
    ASSERT_TRUE(engine.Submit(sampled("s", prompt), Collect(busy)).ok());
    while (engine.Step()) {
    }
  }
  ASSERT_EQ(alone.tokens["s"].size(), 40u);
  EXPECT_EQ(alone.tokens["s"], busy.tokens["s"]);
}

TEST_F(EngineTest, StopStringsEndTheRequestAndAreTrimmed) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  auto pool = Pool(2048);
  EngineOptions o;
  o.log_batches = false;
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, o, &*tokenizer);
  auto prompt = tokenizer->Encode("ROMEO:\n", /*add_bos=*/true);
  ASSERT_TRUE(prompt.ok());
  std::map<std::string, std::string> text;
  std::map<std::string, RequestOutput> last;
  auto collect = [&](const OutputView& out) {
    const std::string rid(out.rid);
    text[rid] += out.new_text;
    if (out.finished) last[rid].Assign(out);
  };
  ASSERT_TRUE(engine.Submit(Greedy("free", *prompt, 60), collect).ok());
  while (engine.Step()) {
  }
  const std::string full = text["free"];
  ASSERT_GT(full.size(), 40u);
  const std::string stop = full.substr(25, 4);
  GenerateRequest r = Greedy("stopped", *prompt, 60);
  r.sampling.ignore_eos = false;
  r.sampling.stop = {stop};
  ASSERT_TRUE(engine.Submit(std::move(r), collect).ok());
  while (engine.Step()) {
  }
  EXPECT_EQ(last["stopped"].finish_reason, FinishReason::kStop);
  EXPECT_EQ(last["stopped"].matched_stop_string, stop);
  EXPECT_EQ(text["stopped"], full.substr(0, full.find(stop)));
}

TEST_F(EngineTest, PrefixCacheServesARepeatedPromptWithTheSameOutput) {
  auto pool = Pool(4096);
  EngineOptions o;
  o.log_batches = false;
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, o);
  const auto prompt = Prompt(100, 7);
  Collected got;
  ASSERT_TRUE(engine.Submit(Greedy("a", prompt, 20), Collect(got)).ok());
  while (engine.Step()) {
  }
  ASSERT_TRUE(engine.Submit(Greedy("b", prompt, 20), Collect(got)).ok());
  while (engine.Step()) {
  }
  EXPECT_EQ(got.last["a"].cached_tokens, 0);
  EXPECT_EQ(got.last["b"].cached_tokens, 96);  // whole pages of the 99 tokens before the last
  EXPECT_EQ(got.tokens["a"], got.tokens["b"]);
  EXPECT_EQ(got.tokens["a"], Solo(prompt, 20));
}

TEST_F(EngineTest, FlushCacheFreesCachedPrefixesOnlyWhenNothingRunsOrWaits) {
  auto pool = Pool(2048);
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, Quiet());
  const int64_t free_at_start = pool->num_free_pages();
  const auto prompt = Prompt(100, 11);
  Collected got;
  ASSERT_TRUE(engine.Submit(Greedy("a", prompt, 20), Collect(got)).ok());
  while (engine.Step()) {
  }
  // a computed 119 tokens (the last sampled one never ran): 7 whole pages stay cached.
  EXPECT_EQ(free_at_start - pool->num_free_pages(), 7);

  // A refused flush frees nothing and says what is pending and what stays.
  auto expect_refused = [&](int64_t running, int64_t queued, int64_t locked_tokens) {
    const Result<FlushCacheResult> r = engine.FlushCache();
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_FALSE(r->flushed);
    EXPECT_EQ(r->num_running_reqs, running);
    EXPECT_EQ(r->num_queue_reqs, queued);
    EXPECT_EQ(r->freed_tokens, 0);
    EXPECT_EQ(r->cached_tokens, 112);
    EXPECT_EQ(r->locked_tokens, locked_tokens);
  };
  // Queued (submitted, not yet scheduled).
  ASSERT_TRUE(engine.Submit(Greedy("b", prompt, 50), Collect(got)).ok());
  expect_refused(/*running=*/0, /*queued=*/1, /*locked_tokens=*/0);
  // Running, borrowing 6 cached pages: the lock covers the whole 7-page edge they sit on.
  ASSERT_TRUE(engine.Step());
  expect_refused(/*running=*/1, /*queued=*/0, /*locked_tokens=*/112);
  while (engine.Step()) {
  }
  EXPECT_EQ(got.last["b"].cached_tokens, 96);
  EXPECT_EQ(std::vector<TokenId>(got.tokens["b"].begin(), got.tokens["b"].begin() + 20), got.tokens["a"]);

  // Idle: every cached page goes back to the pool, and the same prompt is computed afresh.
  const int64_t cached_pages = free_at_start - pool->num_free_pages();
  const Result<FlushCacheResult> flushed = engine.FlushCache();
  ASSERT_TRUE(flushed.ok()) << flushed.error();
  EXPECT_TRUE(flushed->flushed);
  EXPECT_EQ(flushed->freed_tokens, cached_pages * 16);
  EXPECT_EQ(flushed->cached_tokens, 0);
  EXPECT_EQ(pool->num_free_pages(), free_at_start);
  ASSERT_TRUE(engine.Submit(Greedy("c", prompt, 20), Collect(got)).ok());
  while (engine.Step()) {
  }
  EXPECT_EQ(got.last["c"].cached_tokens, 0);
  EXPECT_EQ(got.tokens["c"], got.tokens["a"]);
}

TEST_F(EngineTest, FlushCacheOnTheEngineThreadAnswersWhenDone) {
  auto pool = Pool(2048);
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, Quiet());
  engine.Start();
  FinishedCounter finished;
  ASSERT_TRUE(engine.Submit(Greedy("a", Prompt(100, 12), 20), finished.Callback()).ok());
  ASSERT_TRUE(finished.WaitFor(1));
  // The engine thread has swept the request by the time it takes the flush; the answer is
  // what it did.
  const Result<FlushCacheResult> flushed = engine.FlushCache();
  ASSERT_TRUE(flushed.ok()) << flushed.error();
  EXPECT_TRUE(flushed->flushed);
  EXPECT_EQ(flushed->freed_tokens, 112);
  EXPECT_EQ(flushed->cached_tokens, 0);
  EXPECT_EQ(engine.FlushCache()->freed_tokens, 0);  // nothing left
  engine.Stop();
  const Result<FlushCacheResult> late = engine.FlushCache();
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.error().find("shutting down"), std::string::npos) << late.error();
}

TEST_F(EngineTest, RejectsWhatCanNeverFitAndAborts) {
  auto pool = Pool(256);
  EngineOptions o;
  o.log_batches = false;
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, o);
  const int64_t free_at_start = pool->num_free_pages();
  Collected got;
  Status too_big = engine.Submit(Greedy("big", Prompt(200, 1), 100), Collect(got));
  EXPECT_FALSE(too_big.ok());
  EXPECT_NE(too_big.message().find("more than the whole pool holds"), std::string::npos) << too_big.message();
  EXPECT_FALSE(engine.Submit(Greedy("ctx", Prompt(500, 1), 100), Collect(got)).ok());
  EXPECT_FALSE(engine.Submit(Greedy("empty", {}, 10), Collect(got)).ok());
  ASSERT_TRUE(engine.Submit(Greedy("x", Prompt(20, 1), 100), Collect(got)).ok());
  EXPECT_FALSE(engine.Submit(Greedy("x", Prompt(20, 1), 10), Collect(got)).ok());  // duplicate rid
  engine.Step();
  engine.Step();
  engine.Abort("x");
  while (engine.Step()) {
  }
  EXPECT_EQ(got.finished_chunks["x"], 1);
  EXPECT_EQ(got.last["x"].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(engine.idle());
  // No leak: once the prefix cache lets go of what the aborted request computed, every page is
  // free again.
  const Result<FlushCacheResult> flushed = engine.FlushCache();
  ASSERT_TRUE(flushed.ok()) << flushed.error();
  EXPECT_TRUE(flushed->flushed);
  EXPECT_EQ(pool->num_free_pages(), free_at_start);
}

TEST_F(EngineTest, EdgeRequests) {
  auto pool = Pool(2048);
  EngineOptions o;
  o.log_batches = false;
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, o);
  Collected got;
  // max_new_tokens 0: prefill only, no token.
  ASSERT_TRUE(engine.Submit(Greedy("zero", Prompt(20, 3), 0), Collect(got)).ok());
  // An abort for an id that is not live is ignored: a later request with that id runs.
  engine.Abort("later");
  ASSERT_TRUE(engine.Submit(Greedy("later", Prompt(12, 4), 5), Collect(got)).ok());
  while (engine.Step()) {
  }
  EXPECT_EQ(got.last["zero"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got.last["zero"].completion_tokens, 0);
  EXPECT_TRUE(got.tokens["zero"].empty());
  EXPECT_EQ(got.last["later"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got.tokens["later"].size(), 5u);
  // After Stop, Submit refuses.
  engine.Stop();
  Status late = engine.Submit(Greedy("late", Prompt(12, 5), 5), Collect(got));
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("shutting down"), std::string::npos) << late.message();
  EXPECT_EQ(got.finished_chunks.count("late"), 0u);
}

TEST_F(EngineTest, ThreadedEngineAcceptsRequestsWhileRunning) {
  auto pool = Pool(2048);
  CpuModelRunner runner(*model_, DefaultKernels(), *pool.storage);
  Engine engine(runner, *pool.allocator, Quiet());
  engine.Start();
  FinishedCounter finished;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(engine.Submit(Greedy("t" + std::to_string(i), Prompt(10 + i, uint64_t(i)), 30), finished.Callback()).ok());
  }
  ASSERT_TRUE(finished.WaitFor(20));
  engine.Stop();
}

// ---- speculative decoding ---------------------------------------------------------------------

// Everything a request delivered, over all its chunks.
struct Delivered {
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::string text;
  int chunks = 0;
  RequestOutput last;
};

struct SpecRun {
  std::map<std::string, Delivered> out;
  EngineStatsSnapshot stats;
  double accept_length = 0;  // tokens appended per verify step, over the whole run
};

enum class Drafts { kNgram, kMtp, kEagle3, kNeverRight };

const std::string kEagle3Draft = std::string(MLASERVE_SOURCE_DIR) + "/models/shakespeare-mla-eagle3";

// Drafts the beginning-of-sequence token, which the bundled model never generates: every draft
// is rejected.
class NeverRightDrafter final : public Drafter {
 public:
  int Propose(const Request&, std::span<TokenId> draft) override {
    std::fill(draft.begin(), draft.end(), TokenId(2042));
    return int(draft.size());
  }
};

// Runs `requests` on one engine (stepped here) until all finish, with drafts when
// num_draft_tokens > 0: prompt lookup, the model's MTP layer (which it must have loaded), or the
// bundled EAGLE-3 draft (the model must capture its layers 1, 2, 3).
// Afterwards every page must be back: the requests' own on finishing, the prefix cache's on a flush.
SpecRun RunTogether(Model& model, const std::vector<GenerateRequest>& requests, int num_draft_tokens,
                    int64_t pool_tokens, const Tokenizer* tokenizer, EngineOptions o = {},
                    Drafts drafts = Drafts::kNgram) {
  const ModelConfig& c = model.config();
  const KvStorageShape shape{.format = KvFormat::kBF16, .num_layers = c.num_hidden_layers,
                             .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                             .page_size = 16, .num_pages = pool_tokens / 16};
  auto storage = HostKvStorage::Create(shape);
  auto allocator = PageAllocator::Create(16, pool_tokens / 16);
  EXPECT_TRUE(storage.ok() && allocator.ok());
  NgramDrafter ngram;
  NeverRightDrafter never_right;
  std::unique_ptr<HostKvStorage> mtp_kv;
  std::unique_ptr<DraftModel> draft_model;
  std::unique_ptr<ModelDrafter> model_drafter;
  if (drafts == Drafts::kMtp) {
    KvStorageShape one_layer = shape;
    one_layer.num_layers = 1;
    mtp_kv = std::move(HostKvStorage::Create(one_layer)).value();
    draft_model = std::make_unique<MtpDraft>(model, DefaultKernels(), *mtp_kv);
  } else if (drafts == Drafts::kEagle3) {
    auto eagle3 = Eagle3Draft::Load(kEagle3Draft, model, DefaultKernels(), 16, pool_tokens / 16);
    EXPECT_TRUE(eagle3.ok()) << eagle3.error();
    if (!eagle3.ok()) return {};
    draft_model = std::move(eagle3).value();
  }
  if (draft_model != nullptr) {
    model_drafter =
        std::make_unique<ModelDrafter>(*draft_model, model.max_batch_tokens(), model.max_context(), num_draft_tokens);
  }
  o.log_batches = false;
  Drafter* drafter = draft_model != nullptr           ? static_cast<Drafter*>(model_drafter.get())
                     : drafts == Drafts::kNeverRight ? static_cast<Drafter*>(&never_right)
                                                     : &ngram;
  o.drafter = num_draft_tokens > 0 ? drafter : nullptr;
  o.num_draft_tokens = num_draft_tokens;
  CpuModelRunner runner(model, DefaultKernels(), **storage);
  Engine engine(runner, **allocator, o, tokenizer);
  SpecRun run;
  for (const GenerateRequest& r : requests) {
    EXPECT_TRUE(engine.Submit(r, [&run](const OutputView& v) {
                  Delivered& d = run.out[std::string(v.rid)];
                  d.tokens.insert(d.tokens.end(), v.new_token_ids.begin(), v.new_token_ids.end());
                  d.logprobs.insert(d.logprobs.end(), v.new_token_logprobs.begin(), v.new_token_logprobs.end());
                  d.top_logprobs.insert(d.top_logprobs.end(), v.new_top_logprobs.begin(), v.new_top_logprobs.end());
                  d.text += v.new_text;
                  ++d.chunks;
                  if (v.finished) d.last.Assign(v);
                }).ok());
  }
  int steps = 0;
  while (engine.Step()) EXPECT_LT(++steps, 100000);
  EXPECT_TRUE(engine.idle());
  const Result<FlushCacheResult> flushed = engine.FlushCache();
  EXPECT_TRUE(flushed.ok() && flushed->flushed);
  EXPECT_EQ((*allocator)->num_free_pages(), (*allocator)->num_pages());
  run.stats = engine.stats();
  const EngineStatsSnapshot& s = run.stats;
  if (s.spec_verify_steps_total > 0) {
    run.accept_length =
        double(s.spec_accepted_tokens_total + s.spec_verify_steps_total) / double(s.spec_verify_steps_total);
  }
  return run;
}

void ExpectSameOutputs(const SpecRun& plain, const SpecRun& speculative) {
  ASSERT_EQ(plain.out.size(), speculative.out.size());
  for (const auto& [rid, want] : plain.out) {
    const Delivered& got = speculative.out.at(rid);
    EXPECT_EQ(got.tokens, want.tokens) << rid;
    EXPECT_EQ(got.text, want.text) << rid;
    EXPECT_EQ(got.logprobs, want.logprobs) << rid;
    ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size()) << rid;
    for (size_t i = 0; i < want.top_logprobs.size(); ++i) {
      ASSERT_EQ(got.top_logprobs[i].size(), want.top_logprobs[i].size()) << rid;
      for (size_t j = 0; j < want.top_logprobs[i].size(); ++j) {
        EXPECT_EQ(got.top_logprobs[i][j].token, want.top_logprobs[i][j].token) << rid;
        EXPECT_EQ(got.top_logprobs[i][j].logprob, want.top_logprobs[i][j].logprob) << rid;
      }
    }
    EXPECT_EQ(got.last.finish_reason, want.last.finish_reason) << rid;
    EXPECT_EQ(got.last.matched_stop_token, want.last.matched_stop_token) << rid;
    EXPECT_EQ(got.last.matched_stop_string, want.last.matched_stop_string) << rid;
    EXPECT_EQ(got.last.completion_tokens, want.last.completion_tokens) << rid;
  }
  EXPECT_EQ(speculative.stats.generation_tokens_total, plain.stats.generation_tokens_total);
  EXPECT_EQ(plain.stats.spec_verify_steps_total, 0);
}

TEST_F(EngineTest, SpeculativeGreedyAloneMatchesTheSoloRunAndAcceptsDrafts) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  auto prompt = tokenizer->Encode("ROMEO:\n", /*add_bos=*/true);
  ASSERT_TRUE(prompt.ok());
  const std::vector<GenerateRequest> one{Greedy("alone", *prompt, 160)};
  const SpecRun plain = RunTogether(*model_, one, 0, 2048, &*tokenizer);
  const SpecRun speculative = RunTogether(*model_, one, 4, 2048, &*tokenizer);
  EXPECT_EQ(plain.out.at("alone").tokens, Solo(*prompt, 160));
  ExpectSameOutputs(plain, speculative);
  // Speculation ran and paid off: fewer chunks (one per step) than tokens.
  EXPECT_GT(speculative.stats.spec_accepted_tokens_total, 0);
  EXPECT_LT(speculative.out.at("alone").chunks, 160);
  std::printf("[ speculative ] alone, k=4: accept len %.2f (%lld drafts accepted of %lld, %lld verify steps)\n",
              speculative.accept_length, (long long)speculative.stats.spec_accepted_tokens_total,
              (long long)speculative.stats.spec_draft_tokens_total,
              (long long)speculative.stats.spec_verify_steps_total);
}

TEST_F(EngineTest, SpeculativeGreedyBatchMatchesPlainDecodingWithStopsAndLogprobs) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const char* texts[] = {"ROMEO:\n", "JULIET:\n", "First Citizen:\n", "KING HENRY:\n",
                         "To be, or not", "The quality of mercy", "HAMLET:\n", "MENENIUS:\n"};
  const int max_new[] = {120, 73, 57, 31, 90, 12, 64, 101};
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) {
    auto prompt = tokenizer->Encode(texts[i], /*add_bos=*/true);
    ASSERT_TRUE(prompt.ok());
    requests.push_back(Greedy("b" + std::to_string(i), *prompt, max_new[i]));
  }
  requests[1].sampling.return_logprob = true;
  requests[1].sampling.top_logprobs_num = 2;
  requests[4].sampling.frequency_penalty = 0.3f;  // greedy over penalised logits: still drafted
  requests[3].sampling.temperature = 0.8f;         // sampled: drafted too, the same draws
  requests[3].sampling.seed = 7;
  // A stop string and a stop token taken from what plain decoding produces, well inside the output.
  const SpecRun free_run = RunTogether(*model_, requests, 0, 4096, &*tokenizer);
  const std::string text6 = free_run.out.at("b6").text;
  ASSERT_GT(text6.size(), 60u);
  requests[6].sampling.stop = {text6.substr(40, 3)};
  requests[7].sampling.stop_token_ids = {free_run.out.at("b7").tokens.at(50)};
  requests[7].sampling.ignore_eos = false;

  const SpecRun plain = RunTogether(*model_, requests, 0, 4096, &*tokenizer);
  const SpecRun speculative = RunTogether(*model_, requests, 5, 4096, &*tokenizer);
  ExpectSameOutputs(plain, speculative);
  EXPECT_EQ(speculative.out.at("b6").last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(speculative.out.at("b6").last.matched_stop_string, text6.substr(40, 3));
  EXPECT_EQ(speculative.out.at("b7").last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(speculative.out.at("b1").logprobs.size(), speculative.out.at("b1").tokens.size());
  for (int i : {0, 2, 3, 5}) {
    EXPECT_EQ(int(speculative.out.at("b" + std::to_string(i)).tokens.size()), max_new[i]);
  }
  EXPECT_GT(speculative.stats.spec_accepted_tokens_total, 0);
  std::printf("[ speculative ] 8 requests, k=5: accept len %.2f (%lld drafts accepted of %lld)\n",
              speculative.accept_length, (long long)speculative.stats.spec_accepted_tokens_total,
              (long long)speculative.stats.spec_draft_tokens_total);
}

TEST_F(EngineTest, SpeculativeDecodingUnderMemoryPressureMatchesAndLeaksNoPage) {
  // A pool that holds a few requests at once and an over-admitting scheduler: drafts compete
  // for pages with decodes, prefill chunks and the prefix cache, and requests are retracted.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 24; ++i) {
    requests.push_back(Greedy("m" + std::to_string(i), Prompt(30 + (i * 37) % 70, i % 2 == 0 ? 1000 : uint64_t(i)),
                              40 + (i * 13) % 60));
  }
  EngineOptions o;
  o.chunked_prefill_size = 48;
  o.schedule_conservativeness = 0.2;
  const SpecRun plain = RunTogether(*model_, requests, 0, 1024, nullptr, o);
  const SpecRun speculative = RunTogether(*model_, requests, 4, 1024, nullptr, o);
  ExpectSameOutputs(plain, speculative);
  EXPECT_GT(speculative.stats.num_retracted_requests_total, 0);
  EXPECT_GT(speculative.stats.spec_verify_steps_total, 0);
}

TEST_F(EngineTest, AdaptiveDraftingPausesADrafterThatIsNeverRight) {
  // Drafts that never land: with adaptive drafting each request drafts one token after its
  // first miss and pauses after four misses in a row (8, 16, ... steps), so it verifies a small
  // share of what fixed drafting does; outputs stay the plain ones either way.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Greedy("n" + std::to_string(i), Prompt(20 + 5 * i, uint64_t(i)), 200));
  const SpecRun plain = RunTogether(*model_, requests, 0, 4096, nullptr);
  const SpecRun fixed = RunTogether(*model_, requests, 4, 4096, nullptr, {}, Drafts::kNeverRight);
  EngineOptions o;
  o.adaptive_drafts = true;
  const SpecRun adaptive = RunTogether(*model_, requests, 4, 4096, nullptr, o, Drafts::kNeverRight);
  ExpectSameOutputs(plain, fixed);
  ExpectSameOutputs(plain, adaptive);
  EXPECT_EQ(fixed.stats.spec_accepted_tokens_total, 0);
  EXPECT_EQ(adaptive.stats.spec_accepted_tokens_total, 0);
  EXPECT_GT(adaptive.stats.spec_draft_tokens_total, 0);  // it keeps probing
  EXPECT_LT(adaptive.stats.spec_draft_tokens_total * 10, fixed.stats.spec_draft_tokens_total);
  std::printf("[ adaptive ] never-right drafts, 4 requests x 200 tokens: %lld drafts verified (fixed: %lld)\n",
              (long long)adaptive.stats.spec_draft_tokens_total, (long long)fixed.stats.spec_draft_tokens_total);
}

TEST_F(EngineTest, SpeculativeSamplingDrawsThePlainTokensAloneAndInABusyBatch) {
  // Seeded sampled requests get drafts and draw, token for token, what plain decoding draws
  // (docs/architecture.md, "Speculative sampling"): alone, and among neighbours in a small pool
  // where chunked prefill, the prefix cache and retraction change the batches around them.
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const char* texts[] = {"ROMEO:\n", "JULIET:\n", "HAMLET:\n"};
  std::vector<GenerateRequest> sampled;
  for (int i = 0; i < 3; ++i) {
    auto prompt = tokenizer->Encode(texts[i], /*add_bos=*/true);
    ASSERT_TRUE(prompt.ok());
    GenerateRequest r = Greedy("s" + std::to_string(i), *prompt, 80);
    r.sampling.seed = uint64_t(11 + i);
    sampled.push_back(std::move(r));
  }
  sampled[0].sampling.temperature = 0.7f;
  sampled[0].sampling.top_p = 0.9f;
  sampled[1].sampling.temperature = 1.0f;
  sampled[1].sampling.top_k = 20;
  sampled[1].sampling.min_p = 0.05f;
  sampled[1].sampling.frequency_penalty = 0.2f;
  sampled[1].sampling.return_logprob = true;
  sampled[1].sampling.top_logprobs_num = 2;
  sampled[2].sampling.temperature = 0.5f;
  sampled[2].sampling.repetition_penalty = 1.1f;

  const SpecRun plain = RunTogether(*model_, sampled, 0, 4096, &*tokenizer);
  std::vector<GenerateRequest> busy = sampled;
  for (int i = 0; i < 12; ++i) {
    busy.push_back(Greedy("n" + std::to_string(i), Prompt(30 + (i * 37) % 70, uint64_t(50 + i)), 40 + (i * 13) % 60));
    if (i % 2 == 0) {
      busy.back().sampling.temperature = 0.9f;
      busy.back().sampling.seed = uint64_t(i);
    }
  }
  EngineOptions o;
  o.chunked_prefill_size = 48;
  o.schedule_conservativeness = 0.2;
  const SpecRun crowded = RunTogether(*model_, busy, 4, 1024, &*tokenizer, o);
  int64_t accepted = 0;
  for (const GenerateRequest& r : sampled) {
    const SpecRun alone = RunTogether(*model_, {r}, 4, 4096, &*tokenizer);
    EXPECT_GT(alone.stats.spec_verify_steps_total, 0) << r.rid;
    accepted += alone.stats.spec_accepted_tokens_total;
    const Delivered& want = plain.out.at(r.rid);
    ASSERT_EQ(int(want.tokens.size()), 80) << r.rid;
    EXPECT_EQ(alone.out.at(r.rid).tokens, want.tokens) << r.rid;
    EXPECT_EQ(alone.out.at(r.rid).logprobs, want.logprobs) << r.rid;
    EXPECT_EQ(crowded.out.at(r.rid).tokens, want.tokens) << r.rid;
    EXPECT_EQ(crowded.out.at(r.rid).text, want.text) << r.rid;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(crowded.stats.num_retracted_requests_total, 0);
  std::printf("[ speculative ] 3 sampled requests alone, k=4: %lld drafts accepted; crowded: %lld retractions\n",
              (long long)accepted, (long long)crowded.stats.num_retracted_requests_total);
}


// ---- MTP (NEXTN) drafts ---------------------------------------------------------------------

class MtpEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(kModel, ModelOptions{.max_batch_tokens = 256, .max_context = 512, .deterministic = true,
                                                 .load_mtp = true});
    ASSERT_TRUE(m.ok()) << m.error();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* MtpEngineTest::model_ = nullptr;

std::vector<GenerateRequest> ShakespearePrompts(const Tokenizer& tokenizer, int count, int max_new) {
  const char* texts[] = {"ROMEO:\n", "JULIET:\n", "First Citizen:\n", "KING HENRY:\n",
                         "To be, or not", "The quality of mercy", "HAMLET:\n", "MENENIUS:\n"};
  std::vector<GenerateRequest> out;
  for (int i = 0; i < count; ++i) {
    auto prompt = tokenizer.Encode(texts[i % 8], /*add_bos=*/true);
    EXPECT_TRUE(prompt.ok());
    out.push_back(Greedy("q" + std::to_string(i), *prompt, max_new - 7 * (i % 5)));
  }
  return out;
}

// Greedy requests alone and 8 at once give plain decoding's tokens with a draft model's drafts,
// fixed and adaptive, and the trained drafts pay: more than 1.5 tokens per verify step.
void ExpectGreedyMatchesPlainDecoding(Model& model, Drafts drafts, const char* label) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  for (const auto& [count, adaptive] : {std::pair{1, false}, std::pair{8, false}, std::pair{8, true}}) {
    SCOPED_TRACE(adaptive ? "adaptive drafting" : "fixed drafting");
    const std::vector<GenerateRequest> requests = ShakespearePrompts(*tokenizer, count, 100);
    const SpecRun plain = RunTogether(model, requests, 0, 4096, &*tokenizer);
    EngineOptions o;
    o.adaptive_drafts = adaptive;
    const SpecRun speculative = RunTogether(model, requests, 3, 4096, &*tokenizer, o, drafts);
    ExpectSameOutputs(plain, speculative);
    EXPECT_GT(speculative.stats.spec_verify_steps_total, 0);
    EXPECT_EQ(speculative.stats.spec_draft_errors_total, 0);
    EXPECT_GT(speculative.accept_length, 1.5);
    std::printf("[ %s ] %d request(s), 3 steps%s: accept len %.2f (%lld drafts accepted of %lld)\n", label, count,
                adaptive ? ", adaptive" : "", speculative.accept_length,
                (long long)speculative.stats.spec_accepted_tokens_total,
                (long long)speculative.stats.spec_draft_tokens_total);
  }
}

// 24 requests under memory pressure: chunked prefill (the draft model follows each chunk), the
// prefix cache (its pages carry draft rows), retraction, and sampled requests among greedy
// ones, all as without drafts, and no page leaked (RunTogether checks).
void ExpectMatchesUnderMemoryPressure(Model& model, Drafts drafts) {
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 24; ++i) {
    GenerateRequest r =
        Greedy("m" + std::to_string(i), Prompt(30 + (i * 37) % 70, i % 2 == 0 ? 1000 : uint64_t(i)), 40 + (i * 13) % 60);
    if (i % 3 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.seed = uint64_t(100 + i);
    }
    requests.push_back(std::move(r));
  }
  EngineOptions o;
  o.chunked_prefill_size = 48;
  o.schedule_conservativeness = 0.2;
  const SpecRun plain = RunTogether(model, requests, 0, 1024, nullptr, o);
  const SpecRun speculative = RunTogether(model, requests, 2, 1024, nullptr, o, drafts);
  ExpectSameOutputs(plain, speculative);
  EXPECT_GT(speculative.stats.num_retracted_requests_total, 0);
  EXPECT_GT(speculative.stats.spec_verify_steps_total, 0);
  EXPECT_EQ(speculative.stats.spec_draft_errors_total, 0);  // (drafting errors are only logged)
}

// (The trained MTP layer's model card reports 60% of first drafts equal to the target's greedy
// token on held-out text.)
TEST_F(MtpEngineTest, GreedyAloneAndInABatchMatchesPlainDecoding) {
  ExpectGreedyMatchesPlainDecoding(*model_, Drafts::kMtp, "mtp");
}

TEST_F(MtpEngineTest, UnderMemoryPressureWithSampledRequestsMatchesAndLeaksNoPage) {
  ExpectMatchesUnderMemoryPressure(*model_, Drafts::kMtp);
}

// One request of a 40-token prompt and one output token, through an engine drafting with
// `drafter` (2 drafts): it finishes in the step that ran its prompt, and its full pages go to the
// prefix cache, so the drafter must have written their draft rows first (a later request with the
// same prefix attends over them). The caller counts the rows in its draft model's cache.
void RunARequestFinishingInItsPrefillStep(Model& model, Drafter& drafter) {
  const ModelConfig& c = model.config();
  auto storage = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = c.num_hidden_layers,
                                        .latent_dim = c.kv_lora_rank, .rope_dim = c.qk_rope_head_dim,
                                        .page_size = 16, .num_pages = 16});
  auto allocator = PageAllocator::Create(16, 16);
  ASSERT_TRUE(storage.ok() && allocator.ok());
  EngineOptions o;
  o.log_batches = false;
  o.drafter = &drafter;
  o.num_draft_tokens = 2;
  CpuModelRunner runner(model, DefaultKernels(), **storage);
  Engine engine(runner, **allocator, o);
  bool finished = false;
  ASSERT_TRUE(engine.Submit(Greedy("warm", Prompt(40, 5), 1), [&](const OutputView& v) { finished |= v.finished; }).ok());
  while (engine.Step()) {
  }
  EXPECT_TRUE(finished);
}

TEST_F(MtpEngineTest, ARequestFinishingInItsPrefillStepLeavesItsMtpRows) {
  const ModelConfig& c = model_->config();
  auto mtp_kv = HostKvStorage::Create({.format = KvFormat::kBF16, .num_layers = 1, .latent_dim = c.kv_lora_rank,
                                       .rope_dim = c.qk_rope_head_dim, .page_size = 16, .num_pages = 16});
  ASSERT_TRUE(mtp_kv.ok());
  MtpDraft draft(*model_, DefaultKernels(), **mtp_kv);
  ModelDrafter drafter(draft, model_->max_batch_tokens(), model_->max_context(), 2);
  RunARequestFinishingInItsPrefillStep(*model_, drafter);
  // Rows with any non-zero value, over the whole MTP cache (it starts zeroed): the prompt's 40.
  const KvHostRows rows = (*mtp_kv)->HostRows();
  std::vector<float> row(size_t(c.kv_cache_dim()));
  int written = 0;
  for (PageId page = 0; page < 16; ++page) {
    for (int pos = 0; pos < 16; ++pos) {
      rows.ReadRows(0, std::span(&page, 1), pos, 1, row.data());
      written += std::any_of(row.begin(), row.end(), [](float v) { return v != 0.0f; }) ? 1 : 0;
    }
  }
  EXPECT_EQ(written, 40);
}

// ---- EAGLE-3 drafts ------------------------------------------------------------------------

class Eagle3EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load(kModel, ModelOptions{.max_batch_tokens = 256, .max_context = 512, .deterministic = true,
                                                 .capture_layers = {1, 2, 3}});
    ASSERT_TRUE(m.ok()) << m.error();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* Eagle3EngineTest::model_ = nullptr;

TEST_F(Eagle3EngineTest, GreedyAloneAndInABatchMatchesPlainDecoding) {
  ExpectGreedyMatchesPlainDecoding(*model_, Drafts::kEagle3, "eagle3");
}

TEST_F(Eagle3EngineTest, UnderMemoryPressureWithSampledRequestsMatchesAndLeaksNoPage) {
  ExpectMatchesUnderMemoryPressure(*model_, Drafts::kEagle3);
}

TEST_F(Eagle3EngineTest, ARequestFinishingInItsPrefillStepLeavesItsDraftRows) {
  auto draft = Eagle3Draft::Load(kEagle3Draft, *model_, DefaultKernels(), 16, 16);
  ASSERT_TRUE(draft.ok()) << draft.error();
  ModelDrafter drafter(**draft, model_->max_batch_tokens(), model_->max_context(), 2);
  RunARequestFinishingInItsPrefillStep(*model_, drafter);
  int written = 0;  // over the whole draft cache (it starts zeroed): the prompt's 40 rows
  for (PageId page = 0; page < 16; ++page) {
    for (int row = 0; row < 16; ++row) written += (*draft)->RowWritten(page, row) ? 1 : 0;
  }
  EXPECT_EQ(written, 40);
}

// Speculative step tuning: the outputs stay plain decoding's (also through rounds at cap 0,
// where the draft model does not run), and measurement rounds complete (short windows here).
TEST_F(Eagle3EngineTest, StepTuningKeepsTheOutputsAndCompletesRounds) {
  auto tokenizer = Tokenizer::FromDirectory(kModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error();
  const std::vector<GenerateRequest> requests = ShakespearePrompts(*tokenizer, 8, 100);
  const SpecRun plain = RunTogether(*model_, requests, 0, 4096, &*tokenizer);
  EngineOptions o;
  o.adaptive_drafts = true;
  o.tune_draft_steps = true;
  o.tune_window_steps = 2;
  o.tune_hold_steps = 4;
  const SpecRun tuned = RunTogether(*model_, requests, 3, 4096, &*tokenizer, o, Drafts::kEagle3);
  ExpectSameOutputs(plain, tuned);
  EXPECT_GT(tuned.stats.spec_tuning_rounds_total, 1);
  EXPECT_GT(tuned.stats.spec_verify_steps_total, 0);
}

}  // namespace
}  // namespace mlaserve
