// The continuous-batching engine: requests in, tokens out, many sequences per forward pass.
// One engine thread runs the loop
//   intake -> schedule (capacity step: KV pages, retraction; batch step: token budget)
//          -> one Forward over decode tokens and prefill chunks together -> sample -> stream
// over one paged KV pool and an optional radix prefix cache, both sized at start-up.
// Threads: Submit/Abort/FlushCache may be called from any thread; they touch only the intake
// queue, whose lock is never held while the engine computes. Output callbacks run on the engine
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_types.h"
#include "engine/request.h"
#include "core/function_ref.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"
#include "kvcache/kv_pool.h"
#include "kvcache/radix_cache.h"
#include "model/model.h"

namespace mlaserve {

class Engine {
 public:
  // model, kernels and pool must outlive the engine. The pool's capacity is the KV budget.
  // tokenizer (optional, must outlive the engine) enables text output and stop strings.
  Engine(Model& model, const KernelSet& kernels, KvPool& pool, const EngineOptions& options,
         const Tokenizer* tokenizer = nullptr);
  ~Engine();  // stops the loop; unfinished requests are aborted (their callbacks see kAbort)

  void Start();  // starts the engine thread
  void Stop();   // finishes the current step, aborts what is left, joins

  // Queues a request. Errors (bad sampling parameters, a prompt that can never fit) are
  // returned here and the callback is never called; otherwise the callback receives the
  // request's outputs, ending with exactly one finished chunk.
  Status Submit(GenerateRequest request, OutputCallback callback);
  // Aborts a queued or running request; its last chunk has finish_reason kAbort. Unknown ids
  // are ignored (the request may have finished already).
  void Abort(const std::string& rid);
  // SGLang's /flush_cache: returns every cached prefix page to the pool, but only when no request
  // is running or queued (otherwise changes nothing; the result says what stayed and why).
  // Blocks until the engine thread has done it (at most one step). Without Start(), runs on the
  // calling thread, which must be the one that calls Step(). An error once Stop() has begun.
  Result<FlushCacheResult> FlushCache();

  // Runs one scheduling step on the calling thread (for tests and offline tools that do not
  // Start() a thread). Returns false when there was nothing to do.
  bool Step();

  EngineStatsSnapshot stats() const;
  bool idle() const;  // nothing queued, running or in the intake

 private:
  struct Intake {
    std::vector<std::unique_ptr<Request>> requests;
    std::vector<std::string> aborts;
    std::vector<std::promise<FlushCacheResult>> flushes;  // answered by TakeIntake
  };

  void Loop();
  void TakeIntake();
  void AbortRequest(const std::string& rid, const std::string& why);
  FlushCacheResult FlushCacheNow();

  // Capacity step.
  bool EnsureFreePages(int64_t pages);
  void ReserveDecodeSlots();
  int64_t DecodePagesNeeded() const;
  void RetractUntil(FunctionRef<bool()> fits);
  // Admits from the queue; `chunks` receives each admitted request's prefill chunk this step.
  std::vector<Request*> AdmitWaiting(int token_budget, bool& logprob_segment_used, std::vector<int>& chunks);
  int64_t ReservedFutureTokens() const;
  // Pages `r` still needs so that its next `chunk` tokens have rows.
  int64_t PagesToCover(const Request& r, int chunk) const;
  // The prefill chunk `r` takes from `budget` this step: capped for prompt logprobs, which need
  // a logits row per token (one such segment per step, kLogprobChunkTokens rows at most).
  int ChunkFor(const Request& r, int budget, bool& logprob_segment_used) const;
  void MatchPrefix(Request& r);

  // Batch step and after.
  void RunBatch(const std::vector<Request*>& decodes, const std::vector<Request*>& prefills,
                const std::vector<int>& prefill_lengths);
  void AfterToken(Request& r, TokenId token, LogprobResult* logprob);
  void CollectInputLogprobs(Request& r, int first_position, int count, const float* logits);
  bool AppendText(Request& r, std::string_view piece);  // true when a stop string matched
  void Finish(Request& r, FinishReason reason, const std::string& error = "");
  void ReleaseKv(Request& r, bool cache_prefix);
  void Stream(Request& r, bool finished, const std::string& error = "");
  void LogPrefill(int new_seqs, int new_tokens, int cached_tokens);
  // Every decode_log_interval decode steps: gen_throughput and retractions over the interval
  // (SGLang's decode stats), and the "Decode batch" line when batches are logged.
  void EndDecodeInterval();
  void PublishStats();

  Model& model_;
  const KernelSet& kernels_;
  KvPool& pool_;
  EngineOptions options_;
  std::unique_ptr<RadixCache> radix_;  // null with disable_radix_cache
  Sampler sampler_;
  const Tokenizer* tokenizer_;
  std::vector<TokenId> eos_token_ids_;

  // Engine-thread state.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  double new_token_ratio_;
  double min_new_token_ratio_;
  double new_token_ratio_decay_;
  int64_t decode_steps_ = 0;
  int64_t tokens_since_log_ = 0;
  Clock::time_point last_decode_log_ = Clock::now();
  uint64_t next_seed_ = 0x5eed;
  std::vector<TokenId> batch_tokens_;          // [max_batch_tokens]
  std::vector<ForwardSegment> batch_segments_;
  std::vector<float> batch_logits_;            // [max_running_requests, vocab]
  std::vector<Request*> scratch_order_;        // the batch's requests, in segment order
  std::vector<int> scratch_rows_;              // each segment's first logits row
  std::vector<int> scratch_from_;              // each segment's first position
  std::vector<int> step_admitted_chunks_;      // this step's admissions' prefill chunks
  std::vector<Request*> step_decodes_;         // this step's decoding requests
  std::vector<Request*> step_prefills_;        // this step's prefill chunks...
  std::vector<int> step_prefill_lengths_;      // ...and their lengths

  // Intake, shared with Submit/Abort.
  mutable std::mutex intake_mutex_;
  std::condition_variable intake_cv_;
  Intake intake_;
  std::unordered_map<std::string, bool> live_rids_;  // under intake_mutex_
  bool stopped_ = false;                              // under intake_mutex_: Submit refuses
  bool loop_started_ = false;                         // under intake_mutex_: Start() ran

  // Published counters.
  mutable std::mutex stats_mutex_;
  EngineStatsSnapshot stats_;
  int64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0, cached_tokens_total_ = 0;
  int64_t requests_total_ = 0, aborted_total_ = 0, max_running_seen_ = 0;
  int64_t retracted_total_ = 0, retracted_in_interval_ = 0, retracted_last_interval_ = 0;
  double last_gen_throughput_ = 0;

  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace mlaserve
