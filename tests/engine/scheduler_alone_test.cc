// The scheduler driven alone: no engine, no runner, no model. Requests go in (Enqueue), plans
// come out (Schedule), and a step's results go back in the order the engine applies them
// (Engine::ApplyStepResults: RecordComputed, a token appended per sequence whose prompt is done,
// finished requests' KV released, SweepFinished). The checks are on the plans themselves: which
// sequences, how many new tokens at which positions, what the prefix cache lent, what a
// retraction put back in the queue.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace mlaserve {
namespace {

constexpr int kPageSize = 16;
constexpr int kMaxContext = 1024;

EngineOptions Options(int max_running_requests, int chunked_prefill_size) {
  EngineOptions o;
  o.max_running_requests = max_running_requests;
  o.chunked_prefill_size = chunked_prefill_size;
  o.log_batches = false;
  return o;
}

std::vector<TokenId> Prompt(int len, TokenId first) {
  std::vector<TokenId> p;
  for (int i = 0; i < len; ++i) p.push_back(first + TokenId(i % 50));
  return p;
}

class Driver {
 public:
  Driver(int64_t pool_tokens, const EngineOptions& options, int max_batch_tokens)
      : pool_(std::move(PageAllocator::Create(kPageSize, pool_tokens / kPageSize)).value()),
        scheduler_(*pool_, options, max_batch_tokens, clock_) {}

  Request* Add(const std::string& rid, std::vector<TokenId> prompt, int max_new_tokens) {
    auto r = std::make_unique<Request>();
    r->spec.rid = rid;
    r->spec.input_ids = prompt;
    r->spec.sampling.max_new_tokens = max_new_tokens;
    r->tokens = std::move(prompt);
    r->kv = std::make_unique<SequenceKv>(*pool_, kMaxContext);
    r->submit_time = clock_.Now();
    Request* raw = r.get();
    scheduler_.Enqueue(std::move(r));
    return raw;
  }

  // One step: plan, then the results of running it (token 7 sampled wherever a prompt is done;
  // a request that reaches max_new_tokens finishes and its KV goes back to the prefix cache).
  Scheduler::Outcome Step() {
    const Scheduler::Outcome outcome = scheduler_.Schedule();
    clock_.AdvanceSeconds(0.01);
    if (outcome != Scheduler::Outcome::kBatch) return outcome;
    scheduler_.RecordComputed();
    for (Request* r : scheduler_.planned_requests()) {
      if (r->pending_tokens() != 0) continue;  // a prefill chunk that is not the prompt's last
      r->tokens.push_back(7);
      if (!r->first_token_time) r->first_token_time = clock_.Now();
      if (r->num_output_tokens() >= r->spec.sampling.max_new_tokens) {
        r->finish_reason = FinishReason::kLength;
        finished_.push_back(r->spec.rid);
      }
    }
    scheduler_.DropRejectedDrafts();
    for (Request* r : scheduler_.planned_requests()) {
      if (r->finish_reason != FinishReason::kNone) scheduler_.ReleaseKv(*r, /*cache_prefix=*/true);
    }
    if (scheduler_.summary().num_decodes > 0) scheduler_.EndDecodeStep();
    scheduler_.SweepFinished();
    return outcome;
  }

  Scheduler& scheduler() { return scheduler_; }
  PageAllocator& pool() { return *pool_; }
  const std::vector<std::string>& finished() const { return finished_; }

 private:
  VirtualClock clock_;
  std::unique_ptr<PageAllocator> pool_;
  Scheduler scheduler_;
  std::vector<std::string> finished_;
};

TEST(SchedulerAlone, ChunksPromptsToTheTokenBudgetAndPutsDecodesFirst) {
  Driver d(4096, Options(8, /*chunked_prefill_size=*/64), /*max_batch_tokens=*/64);
  d.Add("a", Prompt(100, 1), 3);
  d.Add("b", Prompt(40, 2), 3);
  // Step 1: a's first 64 tokens; a chunked request ends the step's admissions.
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  const BatchPlan& plan = d.scheduler().plan();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].num_computed_tokens, 0);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 64);
  EXPECT_EQ(d.scheduler().summary().new_seqs, 1);
  // Step 2: a's last 36, then b's first 28 (what is left of the budget).
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(plan.sequences[0].num_computed_tokens, 64);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 36);
  EXPECT_EQ(plan.sequences[1].num_new_tokens, 28);
  // Step 3: a decodes (first), b's last 12.
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(d.scheduler().planned_requests()[0]->spec.rid, "a");
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(plan.sequences[0].num_computed_tokens, 100);
  EXPECT_EQ(plan.sequences[1].num_computed_tokens, 28);
  EXPECT_EQ(plan.sequences[1].num_new_tokens, 12);
  EXPECT_EQ(d.scheduler().summary().num_decodes, 1);
  while (d.Step() != Scheduler::Outcome::kIdle) {}
  EXPECT_EQ(d.finished(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.pool().num_free_pages() + d.scheduler().evictable_pages(), 4096 / kPageSize);
}

TEST(SchedulerAlone, RunsNoMoreThanMaxRunningRequests) {
  Driver d(4096, Options(/*max_running_requests=*/2, 512), 512);
  for (int i = 0; i < 5; ++i) d.Add("r" + std::to_string(i), Prompt(10, TokenId(100 * i)), 4);
  int steps = 0;
  while (d.Step() != Scheduler::Outcome::kIdle) {
    ++steps;
    EXPECT_LE(d.scheduler().num_running(), 2);
    EXPECT_LE(d.scheduler().plan().sequences.size(), 2u);
  }
  EXPECT_EQ(d.finished().size(), 5u);
  EXPECT_GT(steps, 4 * 2);  // three waves of at most two
}

TEST(SchedulerAlone, RetractsTheRequestCheapestToRecomputeWhenDecodeRunsOutOfPages) {
  // 6 pages of 16 = 96 tokens. Two requests of 30 prompt tokens each want 40 new ones: they
  // are admitted together (the future-token estimate is a ratio), then decode runs out of pages.
  EngineOptions options = Options(8, 512);
  options.schedule_conservativeness = 0.3;
  Driver d(96, options, 512);
  d.Add("a", Prompt(30, 1), 40);
  d.Add("b", Prompt(30, 300), 40);
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  ASSERT_EQ(d.scheduler().plan().sequences.size(), 2u);
  while (d.scheduler().counters().retracted_total == 0) ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  // The step that retracted still ran the other one, alone; the victim waits at the queue's head.
  EXPECT_EQ(d.scheduler().counters().retracted_total, 1);
  EXPECT_EQ(d.scheduler().num_running(), 1);
  EXPECT_EQ(d.scheduler().num_waiting(), 1);
  EXPECT_EQ(d.scheduler().plan().sequences.size(), 1u);
  while (d.Step() != Scheduler::Outcome::kIdle) {}
  EXPECT_EQ(d.finished().size(), 2u);
}

TEST(SchedulerAlone, TheRadixCacheLendsAFinishedPromptsFullPages) {
  Driver d(4096, Options(8, 512), 512);
  const std::vector<TokenId> prompt = Prompt(50, 5);
  d.Add("first", prompt, 2);
  while (d.Step() != Scheduler::Outcome::kIdle) {}
  d.Add("second", prompt, 2);
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  // 50 tokens: 3 full pages (48) cached; at least one token must run, so 48 are lent.
  EXPECT_EQ(d.scheduler().summary().cached_tokens, 48);
  EXPECT_EQ(d.scheduler().plan().sequences[0].num_computed_tokens, 48);
  EXPECT_EQ(d.scheduler().plan().sequences[0].num_new_tokens, 2);
  EXPECT_EQ(d.scheduler().counters().cached_tokens_total, 48);
}

TEST(SchedulerAlone, AdmissionTimesComeFromTheInjectedClock) {
  Driver d(4096, Options(8, 512), 512);
  d.Add("a", Prompt(10, 1), 5);
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);  // the clock moves 10 ms after each Schedule
  Request* b = d.Add("b", Prompt(10, 90), 5);
  ASSERT_EQ(d.Step(), Scheduler::Outcome::kBatch);
  ASSERT_TRUE(b->first_scheduled_time.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(b->first_scheduled_time->time_since_epoch()).count(),
            10);
}

}  // namespace
}  // namespace mlaserve
