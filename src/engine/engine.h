// The continuous-batching engine: requests in, tokens out, many sequences per forward pass.
// One engine thread runs the loop
//   intake -> Scheduler::Schedule (a BatchPlan: capacity step, then batch step)
//          -> ModelRunner::Execute (one forward over decode tokens and prefill chunks together)
//          -> OutputProcessor::Process (sample or verify drafts, detokenize, stop checks, stream)
//          -> Scheduler::DropRejectedDrafts (speculative decoding's KV rollback)
// over the page ids of one paged KV cache (a PageAllocator) and an optional radix prefix cache
// (the scheduler's), both sized at start-up. The engine knows the model only through the
// ModelRunner interface, and the KV bytes not at all (the runner's KvStorage holds them).
// Threads: Submit/Abort/FlushCache may be called from any thread; they touch only the intake
// queue, whose lock is never held while the engine computes. Output callbacks run on the engine
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/draft_step_tuner.h"
#include "engine/engine_types.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kvcache/page_allocator.h"

namespace mlaserve {

class Engine {
 public:
  // runner and allocator must outlive the engine; the allocator's page ids index the runner's
  // KV storage (same page_size and num_pages), and its capacity is the KV budget. tokenizer (optional, must outlive the engine)
  // enables text output and stop strings.
  // clock: where every timestamp comes from (engine/clock.h); must outlive the engine.
  Engine(ModelRunner& runner, PageAllocator& allocator, const EngineOptions& options, const Tokenizer* tokenizer = nullptr,
         const Clock& clock = Clock::Real());
  ~Engine();  // stops the loop; unfinished requests are aborted (their callbacks see kAbort)

  void Start();  // starts the engine thread
  void Stop();   // finishes the current step, aborts what is left, joins

  // Queues a request. Errors (bad sampling parameters, a prompt that can never fit) are
  // returned here and the callback is never called; otherwise the callback receives the
  // request's outputs (views valid during each call: see OutputView), ending with exactly one
  // finished chunk.
  Status Submit(GenerateRequest request, OutputCallback callback);
  // Aborts a queued or running request; its last chunk has finish_reason kAbort. Unknown ids
  // are ignored (the request may have finished already).
  void Abort(const std::string& rid);
  // SGLang's /flush_cache: returns every cached prefix page to the allocator, but only when no request
  // is running or queued (otherwise changes nothing; the result says what stayed and why).
  // Blocks until the engine thread has done it (at most one step). Without Start(), runs on the
  // calling thread, which must be the one that calls Step(). An error once Stop() has begun.
  Result<FlushCacheResult> FlushCache();

  // Runs one scheduling step on the calling thread (for tests and offline tools that do not
  // Start() a thread). Returns false when there was nothing to do.
  bool Step();

  EngineStatsSnapshot stats() const;
  bool idle() const;  // nothing queued, running or in the intake
  // Width of a captured row (GenerateRequest::capture_hidden_states); 0: the model captures nothing.
  int captured_width() const { return runner_.info().captured_width; }

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

  // Ends a request: its text flushed, its KV released (full pages to the prefix cache), its id
  // free again, its last chunk delivered. The request must be out of the queues or swept later.
  // release_kv false: the caller releases r's KV later (ApplyStepResults, after the drafter's
  // Observe).
  void Finish(Request& r, FinishReason reason, const std::string& error = "", bool release_kv = true);
  // After a decode-only step (speculative step tuning): records it, logs a finished measurement
  // round, and passes the tuner's cap to the scheduler.
  // A step's results, applied here and nowhere else, in the order stated in its body: KV rows
  // recorded, tokens sampled and delivered, rejected drafts dropped, the drafter's observation,
  // finished requests' KV released, counters. Returns the tokens appended.
  int ApplyStepResults(const ModelRunnerOutput& out);
  void TuneDraftSteps(int appended_tokens, Clock::duration elapsed);
  void LogPrefill(const PlanSummary& planned);
  // Every decode_log_interval decode steps: gen_throughput and retractions over the interval
  // (SGLang's decode stats), and the "Decode batch" line when batches are logged.
  void EndDecodeInterval();
  void PublishStats();

  ModelRunner& runner_;
  PageAllocator& allocator_;
  const Clock& clock_;
  EngineOptions options_;
  Scheduler scheduler_;      // engine-thread state: the queues, the prefix cache, each step's plan
  OutputProcessor output_;   // engine-thread state: sampling, detokenization, delivery

  // Engine-thread state.
  int64_t tokens_since_log_ = 0;
  bool draft_error_logged_ = false;  // a drafter's Observe failed once (logged once)
  int64_t draft_errors_ = 0;  // steps whose Drafter::Observe failed
  std::optional<DraftStepTuner> step_tuner_;  // EngineOptions::tune_draft_steps
  int64_t tuning_rounds_ = 0;                 // its measurement rounds completed
  // Requests that finished in this step, their KV kept until the drafter has observed the step
  // (an MTP drafter writes its cache rows for their last positions); capacity reserved.
  std::vector<Request*> finished_in_step_;
  Clock::time_point last_decode_log_;
  uint64_t next_seed_ = 0x5eed;

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
  int64_t generation_tokens_total_ = 0;
  int64_t requests_total_ = 0, aborted_total_ = 0, max_running_seen_ = 0;
  int64_t retracted_last_interval_ = 0;
  double last_gen_throughput_ = 0;
  OutputProcessor::SpecCounters spec_at_last_log_;  // at the start of the decode log interval
  double last_accept_length_ = 0, last_accept_rate_ = 0;

  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace mlaserve
