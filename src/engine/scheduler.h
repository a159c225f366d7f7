// The engine's scheduling policy: which requests run each step and how many new tokens each is
// granted, written as a BatchPlan (engine/batch_plan.h). It never calls the model.
// Each step has two parts, as in SGLang and TensorRT-LLM:
//   capacity: every decoding request gets a KV slot for its next token; when the pool is short,
//             unlocked prefix-cache pages are evicted, then requests retracted (to the front of
//             the queue, recomputed later);
//   batch:    the token budget (--chunked-prefill-size, capped by the runner's max_batch_tokens)
//             goes to decodes (one token each, plus their drafts when speculating,
//             as far as free pages allow), running prefills, then admissions from the queue
//             (fcfs or lpm), which match the longest cached prefix and reserve KV pages.
// Ownership: the scheduler owns the queued and running requests (the engine hands them over at
// intake and takes them back to abort), the radix prefix cache, and the page bookkeeping of
// every request's SequenceKv, through the PageAllocator it borrows; the pages' bytes are the
// KvStorage of whoever executes the plan (kvcache/kv_storage.h).
// Threads: the engine thread only.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/function_ref.h"
#include "engine/batch_plan.h"
#include "engine/engine_types.h"
#include "engine/request.h"
#include "kvcache/page_allocator.h"
#include "kvcache/radix_cache.h"

namespace mlaserve {

// Prompt tokens a request that wants prompt logprobs prefills per step (each needs a row of
// logits): a plan holds at most max_running_requests + kLogprobChunkTokens logits rows.
inline constexpr int kLogprobChunkTokens = 64;

// What the last Schedule planned: its decodes, and SGLang's "Prefill batch" fields.
struct PlanSummary {
  int num_decodes = 0;     // sequences granted their next decode token
  int new_seqs = 0;        // requests admitted from the queue
  int new_tokens = 0;      // their prefill tokens this step
  int cached_tokens = 0;   // their tokens served by the prefix cache
};

struct SchedulerCounters {
  int64_t prompt_tokens_total = 0;  // prompt tokens of requests admitted (first admission only)
  int64_t cached_tokens_total = 0;  // of which the prefix cache served
  int64_t retracted_total = 0;
};

class Scheduler {
 public:
  enum class Outcome {
    kIdle,       // nothing queued or running
    kBlocked,    // nothing runs and the head of the queue waits for memory
    kRetracted,  // no batch fit: running requests were retracted to make room (plan empty)
    kBatch,      // plan() holds this step's work
  };

  // allocator (page ids, the KV budget) and clock (admission times) must outlive the scheduler.
  // max_batch_tokens: the most tokens one plan may hold.
  Scheduler(PageAllocator& allocator, const EngineOptions& options, int max_batch_tokens,
            const Clock& clock = Clock::Real());

  // The queue's tail. The request's kv must be an empty sequence on the scheduler's allocator.
  void Enqueue(std::unique_ptr<Request> r);
  // Takes a queued or running request out (null when there is none with that id).
  std::unique_ptr<Request> Remove(const std::string& rid);
  // Takes everything out: the queue in order, then the running requests.
  std::vector<std::unique_ptr<Request>> RemoveAll();

  // Plans one step (capacity step, then batch step). With kBatch, plan() and planned_requests()
  // describe it until the next Schedule; the scheduler has reserved the pages it needs.
  Outcome Schedule();
  const BatchPlan& plan() const { return plan_; }
  // The requests of plan().sequences, in the same order (they stay in the running set).
  std::span<Request* const> planned_requests() const { return planned_; }
  const PlanSummary& summary() const { return summary_; }
  // After the runner executed plan() without error: its new positions now have KV rows.
  void RecordComputed();
  // After the step's outputs were processed: the rows of drafts that were not accepted are
  // dead, so each verified request's KV ends where its history's last token starts (as if it
  // had decoded one token at a time) and the pages past that go back to the allocator.
  void DropRejectedDrafts();
  // Speculative step tuning: the most drafts any request verifies per step from now on (0..k;
  // 0: none, k or more: no cap), for Draft and AdaptDraftLimit.
  void set_draft_cap(int cap) { draft_cap_ = cap; }
  // After a plan with decodes ran: new_token_ratio decays one step. True every
  // decode_log_interval decode steps (the end of a decode log interval).
  bool EndDecodeStep();
  // Drops finished requests (finish_reason set) from the running set.
  void SweepFinished();

  // A request's KV goes back: with cache_prefix its full pages to the prefix cache (which owns
  // them from then on), the rest to the pool; its prefix lock is released. Called at finish and
  // at retraction.
  void ReleaseKv(Request& r, bool cache_prefix);
  // SGLang's /flush_cache, decided here: empties the prefix cache only when nothing runs or
  // waits. Logs nothing (the engine does).
  FlushCacheResult FlushCache();

  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  int64_t running_kv_tokens() const;  // KV positions computed for the running requests
  int64_t evictable_pages() const { return radix_ ? radix_->evictable_pages() : 0; }
  const SchedulerCounters& counters() const { return counters_; }
  // Retractions since the last call (the decode log interval's count).
  int64_t TakeIntervalRetractions();

 private:
  bool EnsureFreePages(int64_t pages);
  void ReserveDecodeSlots();
  int64_t DecodePagesNeeded() const;
  void RetractUntil(FunctionRef<bool()> fits);
  // Admits from the queue; `chunks` receives each admitted request's prefill chunk this step.
  void AdmitWaiting(int token_budget, bool& logprob_segment_used, std::vector<Request*>& admitted,
                    std::vector<int>& chunks);
  int64_t ReservedFutureTokens() const;
  // Pages `r` still needs so that its next `chunk` tokens have rows.
  int64_t PagesToCover(const Request& r, int chunk) const;
  // The prefill chunk `r` takes from `budget` this step: capped for prompt logprobs, which need
  // a logits row per token (one such segment per step, kLogprobChunkTokens rows at most).
  int ChunkFor(const Request& r, int budget, bool& logprob_segment_used) const;
  void MatchPrefix(Request& r);
  // Proposes drafts for a decoding request into r.draft_tokens: at most `budget`, never past
  // max_new_tokens or the context, and only as many as free pages hold (a guess never evicts
  // or retracts). Returns how many.
  int Draft(Request& r, int budget);
  void DropRejectedDrafts(Request& r);
  // Adaptive drafting, after a verify step that accepted `accepted` drafts: the next limit is
  // one more than the accepted run (up to k); kDraftMissesBeforePause steps in a
  // row accepting none pause drafting for 8, then 16, ... 256 decode steps (probing with one
  // draft in between), so a drafter whose guesses never land costs little.
  static constexpr int kDraftMissesBeforePause = 4;
  static constexpr int kFirstDraftPause = 8;
  static constexpr int kLongestDraftPause = 256;
  void AdaptDraftLimit(Request& r, int accepted) const;
  void AddToPlan(Request* r, int num_new_tokens);

  PageAllocator& allocator_;
  const Clock& clock_;
  EngineOptions options_;
  int max_batch_tokens_;
  std::unique_ptr<RadixCache> radix_;  // null with disable_radix_cache

  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  double new_token_ratio_;
  double min_new_token_ratio_;
  double new_token_ratio_decay_;
  int64_t decode_steps_ = 0;
  SchedulerCounters counters_;
  int64_t retracted_in_interval_ = 0;

  BatchPlan plan_;
  std::vector<Request*> planned_;             // plan_.sequences' requests
  PlanSummary summary_;
  int draft_cap_ = 1 << 30;  // set_draft_cap
  std::vector<Request*> step_decodes_;        // this step's decoding requests
  std::vector<Request*> step_prefills_;       // this step's prefill chunks...
  std::vector<int> step_prefill_lengths_;     // ...and their lengths
  std::vector<Request*> step_admitted_;       // this step's admissions...
  std::vector<int> step_admitted_chunks_;     // ...and their prefill chunks
};

}  // namespace mlaserve
