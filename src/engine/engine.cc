#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdio>

#include "core/check.h"
#include "core/log.h"
#include "engine/drafter.h"

namespace mlaserve {

namespace {

// max_running_requests is at least 1 and at most one decode token per batch slot.
EngineOptions Clamped(EngineOptions options, int max_batch_tokens) {
  options.max_running_requests = std::max(1, std::min(options.max_running_requests, max_batch_tokens));
  return options;
}

}  // namespace

Engine::Engine(ModelRunner& runner, PageAllocator& allocator, const EngineOptions& options, const Tokenizer* tokenizer,
               const Clock& clock)
    : runner_(runner),
      allocator_(allocator),
      clock_(clock),
      options_(Clamped(options, runner.info().max_batch_tokens)),
      scheduler_(allocator, options_, runner.info().max_batch_tokens, clock),
      output_(runner.info(), tokenizer, clock),
      last_decode_log_(clock.Now()) {
  // A row per decode (plus its drafts: at most max_batch_tokens rows in all) and one prompt-
  // logprob segment.
  const int base_rows = options_.max_running_requests + kLogprobChunkTokens;
  const int draft_rows = options_.speculative() ? options_.max_running_requests * options_.num_draft_tokens : 0;
  runner_.ReserveLogitsRows(std::min(base_rows + draft_rows, std::max(base_rows, runner.info().max_batch_tokens)));
  stats_.max_total_num_tokens = allocator_.capacity_tokens();
  finished_in_step_.reserve(size_t(runner.info().max_batch_tokens));  // a plan's sequences, at most
  if (options_.speculative() && options_.tune_draft_steps) {
    step_tuner_.emplace(options_.num_draft_tokens, options_.tune_window_steps, options_.tune_hold_steps);
    scheduler_.set_draft_cap(step_tuner_->cap());
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    loop_started_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    // Under the intake lock: the loop cannot miss the wake-up, and Submit refuses from now on.
    std::lock_guard<std::mutex> lock(intake_mutex_);
    stop_.store(true);
    stopped_ = true;
  }
  intake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  TakeIntake();
  for (auto& r : scheduler_.RemoveAll()) Finish(*r, FinishReason::kAbort, "the server is shutting down");
  PublishStats();
}

Status Engine::Submit(GenerateRequest request, OutputCallback callback) {
  const ModelRunnerInfo& model = runner_.info();
  if (request.input_ids.empty()) return Status::Error("the prompt is empty");
  for (TokenId id : request.input_ids) {
    if (id < 0 || id >= model.vocab_size) {
      return Status::Error("input token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(model.vocab_size) + ")");
    }
  }
  MLA_RETURN_IF_ERROR(Validate(request.sampling, model.vocab_size));
  if (request.logprob_start_len >= int(request.input_ids.size())) {
    return Status::Error("logprob_start_len " + std::to_string(request.logprob_start_len) +
                         " must be below the prompt length " + std::to_string(request.input_ids.size()));
  }
  if (request.capture_hidden_states && model.captured_width == 0) {
    return Status::Error("capture_hidden_states: the model was loaded without capture layers");
  }
  if (request.capture_hidden_states && !options_.disable_radix_cache) {
    return Status::Error("capture_hidden_states needs the radix cache off (--disable-radix-cache): positions served "
                         "from the prefix cache are never run, so they would have no captured rows");
  }
  const int64_t total = int64_t(request.input_ids.size()) + request.sampling.max_new_tokens;
  if (total > model.max_context) {
    return Status::Error("the prompt (" + std::to_string(request.input_ids.size()) +
                         " tokens) plus max_new_tokens (" + std::to_string(request.sampling.max_new_tokens) +
                         ") exceeds the context length " + std::to_string(model.max_context));
  }
  if (total > allocator_.capacity_tokens()) {
    return Status::Error("the request needs " + std::to_string(total) +
                         " tokens of KV cache, more than the whole pool holds (max_total_num_tokens=" +
                         std::to_string(allocator_.capacity_tokens()) + ")");
  }
  auto r = std::make_unique<Request>();
  r->spec = std::move(request);
  r->callback = std::move(callback);
  r->tokens = r->spec.input_ids;
  r->tokens.reserve(size_t(total));
  r->kv = std::make_unique<SequenceKv>(allocator_, model.max_context);
  r->penalties = PenaltyState(r->spec.sampling.max_new_tokens);
  if (options_.speculative()) {
    r->draft_tokens.reserve(size_t(options_.num_draft_tokens));
    r->draft_limit = options_.num_draft_tokens;
    r->next_drafts.reserve(size_t(options_.num_draft_tokens));
  }
  MLA_RETURN_IF_ERROR(output_.Prepare(*r));
  r->submit_time = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    if (stopped_) return Status::Error("the server is shutting down");
    if (r->spec.rid.empty()) r->spec.rid = "req-" + std::to_string(next_seed_++);
    if (live_rids_.count(r->spec.rid)) {
      return Status::Error("request id '" + r->spec.rid + "' is already in flight");
    }
    r->seed = ResolveSeed(r->spec.sampling, std::hash<std::string>{}(r->spec.rid) ^ (next_seed_ += 0x9E37));
    live_rids_.emplace(r->spec.rid, true);
    intake_.requests.push_back(std::move(r));
  }
  intake_cv_.notify_one();
  return Status::Ok();
}

void Engine::Abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    // Only a live request: a stale abort must not hit a later request that reuses the id.
    if (!live_rids_.count(rid)) return;
    intake_.aborts.push_back(rid);
  }
  intake_cv_.notify_one();
}

Result<FlushCacheResult> Engine::FlushCache() {
  std::future<FlushCacheResult> done;
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    if (stopped_) return Status::Error("the server is shutting down");
    if (loop_started_) {
      intake_.flushes.emplace_back();
      done = intake_.flushes.back().get_future();
    }
  }
  if (!done.valid()) {  // no engine thread: the caller drives Step(), so this is its thread
    TakeIntake();
    return FlushCacheNow();
  }
  intake_cv_.notify_one();
  // Stop() takes the intake after joining the loop, so every queued flush is answered.
  return done.get();
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(intake_mutex_);
  return live_rids_.empty();
}

void Engine::Loop() {
  while (!stop_.load()) {
    const bool has_work = scheduler_.num_waiting() > 0 || scheduler_.num_running() > 0;
    if (!has_work) {
      std::unique_lock<std::mutex> lock(intake_mutex_);
      intake_cv_.wait(lock, [&] {
        return stop_.load() || !intake_.requests.empty() || !intake_.aborts.empty() ||
               !intake_.flushes.empty();
      });
    }
    if (stop_.load()) break;
    Step();
  }
}

void Engine::TakeIntake() {
  Intake taken;
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    std::swap(taken, intake_);
  }
  for (auto& r : taken.requests) scheduler_.Enqueue(std::move(r));
  for (const std::string& rid : taken.aborts) AbortRequest(rid, "aborted by the client");
  for (auto& flush : taken.flushes) flush.set_value(FlushCacheNow());
}

FlushCacheResult Engine::FlushCacheNow() {
  const FlushCacheResult result = scheduler_.FlushCache();
  if (result.flushed) {
    Log(LogLevel::kInfo, "Cache flushed successfully! #freed-token: %" PRId64, result.freed_tokens);
  } else {
    Log(LogLevel::kWarning, "Cache not flushed because there are pending requests. #queue-req: %" PRId64 ", #running-req: %" PRId64,
        result.num_queue_reqs, result.num_running_reqs);
  }
  PublishStats();
  return result;
}

void Engine::AbortRequest(const std::string& rid, const std::string& why) {
  if (std::unique_ptr<Request> r = scheduler_.Remove(rid)) Finish(*r, FinishReason::kAbort, why);
}

// ---- one step --------------------------------------------------------------------------------

bool Engine::Step() {
  TakeIntake();
  const Scheduler::Outcome outcome = scheduler_.Schedule();
  if (outcome != Scheduler::Outcome::kBatch) {
    PublishStats();
    return outcome == Scheduler::Outcome::kRetracted;
  }
  // Speculative step tuning times decode-only steps (a prefill chunk's cost is not the drafts').
  const Clock::time_point step_start = clock_.Now();
  const bool decode_only =
      step_tuner_ && std::all_of(scheduler_.planned_requests().begin(), scheduler_.planned_requests().end(),
                                 [](const Request* r) { return r->decoding(); });
  const Result<ModelRunnerOutput> out = runner_.Execute(scheduler_.plan());
  if (out.ok()) {
    const int sampled = ApplyStepResults(*out);
    if (decode_only) TuneDraftSteps(sampled, clock_.Now() - step_start);
  } else {
    // Inputs were validated at Submit; a failure here is a bug, but never take the server down:
    // fail the batch's requests with the reason.
    for (Request* r : scheduler_.planned_requests()) {
      Finish(*r, FinishReason::kAbort, "internal error: " + out.status().message());
    }
  }
  const PlanSummary& planned = scheduler_.summary();
  if (options_.log_batches && planned.new_seqs > 0) LogPrefill(planned);
  if (planned.num_decodes > 0 && scheduler_.EndDecodeStep()) EndDecodeInterval();
  scheduler_.SweepFinished();
  PublishStats();
  return true;
}

int Engine::ApplyStepResults(const ModelRunnerOutput& out) {
  const BatchPlan& plan = scheduler_.plan();
  const std::span<Request* const> requests = scheduler_.planned_requests();
  const DrafterInput input = options_.speculative() ? options_.drafter->input() : DrafterInput::kNone;
  // (Step tuning at cap 0 decodes plainly: the draft model does not run, so its rows of these
  // positions stay unwritten, which only lowers later drafts' acceptance.)
  const bool observe = input != DrafterInput::kNone && (!step_tuner_ || step_tuner_->cap() > 0);
  // 1. The plan's new positions have KV rows.
  scheduler_.RecordComputed();
  // 2. Logits become tokens: prompt logprobs, sampling or verification, finish checks, text, one
  //    chunk per request. A request that finishes is delivered its last chunk now; its KV stays.
  finished_in_step_.clear();
  const int sampled = output_.Process(plan, requests, out.logits, out.captured_hidden_states,
                                      [this](Request& r, FinishReason reason) {
                                        Finish(r, reason, "", /*release_kv=*/false);
                                        finished_in_step_.push_back(&r);
                                      });
  // 3. Rows of rejected drafts are dropped (each verified request's KV ends at its history).
  scheduler_.DropRejectedDrafts();
  // 4. The drafter observes the step: it writes its own rows of every position the step made
  //    final, the finished requests' included (their KV is still held).
  if (input != DrafterInput::kNone && !observe) {
    for (Request* r : requests) r->next_drafts.clear();  // (none stale when drafting resumes)
  }
  if (observe) {
    const Status drafted = options_.drafter->Observe(
        plan, requests, input == DrafterInput::kFinalHidden ? out.hidden_states : out.captured_hidden_states);
    if (!drafted.ok()) ++draft_errors_;
    if (!drafted.ok() && !draft_error_logged_) {
      Log(LogLevel::kWarning, "[mlaserve] drafting failed, going on without drafts: %s", drafted.message().c_str());
      draft_error_logged_ = true;
    }
  }
  // 5. The finished requests' KV goes back: full pages to the prefix cache, the rest to the pool.
  for (Request* r : finished_in_step_) scheduler_.ReleaseKv(*r, /*cache_prefix=*/true);
  finished_in_step_.clear();
  // 6. Counters (the decode interval, the sweep of finished requests and the published stats
  //    follow in Step, for batches that failed too).
  generation_tokens_total_ += sampled;
  tokens_since_log_ += sampled;
  return sampled;
}

void Engine::TuneDraftSteps(int appended_tokens, Clock::duration elapsed) {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  const bool round_ended = step_tuner_->Record(appended_tokens, ns);
  tuning_rounds_ += round_ended ? 1 : 0;
  if (round_ended && options_.log_batches) {
    std::string rates;
    for (size_t c = 0; c < step_tuner_->rates().size(); ++c) {
      rates += (c == 0 ? "" : ", ") + std::to_string(c) + ": " +
               std::to_string(int64_t(std::llround(step_tuner_->rates()[c])));
    }
    Log(LogLevel::kInfo, "[mlaserve] speculative step tuning: %d draft(s) per step (decode tok/s by drafts: %s)",
        step_tuner_->cap(), rates.c_str());
  }
  scheduler_.set_draft_cap(step_tuner_->cap());
}

void Engine::Finish(Request& r, FinishReason reason, const std::string& error, bool release_kv) {
  r.finish_reason = reason;
  output_.FlushText(r);
  if (release_kv) scheduler_.ReleaseKv(r, /*cache_prefix=*/true);
  ++requests_total_;
  if (reason == FinishReason::kAbort) ++aborted_total_;
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    live_rids_.erase(r.spec.rid);
  }
  output_.Deliver(r, /*finished=*/true, error);
}

// ---- logs and counters -----------------------------------------------------------------------

void Engine::LogPrefill(const PlanSummary& planned) {
  const EngineStatsSnapshot s = stats();
  Log(LogLevel::kInfo, "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
      "#running-req: %d, #queue-req: %d,",
      planned.new_seqs, planned.new_tokens, planned.cached_tokens, s.token_usage,
      scheduler_.num_running(), scheduler_.num_waiting());
}

void Engine::EndDecodeInterval() {
  const Clock::time_point now = clock_.Now();
  const double elapsed = ElapsedSeconds(last_decode_log_, now);
  last_gen_throughput_ = elapsed > 0 ? double(tokens_since_log_) / elapsed : 0.0;
  last_decode_log_ = now;
  tokens_since_log_ = 0;
  retracted_last_interval_ = scheduler_.TakeIntervalRetractions();
  // SGLang's accept len: tokens appended per verify step (accepted drafts + the bonus token).
  const OutputProcessor::SpecCounters& spec = output_.spec_counters();
  const int64_t verify_steps = spec.verify_steps - spec_at_last_log_.verify_steps;
  const int64_t drafts = spec.draft_tokens - spec_at_last_log_.draft_tokens;
  const int64_t accepted = spec.accepted_tokens - spec_at_last_log_.accepted_tokens;
  spec_at_last_log_ = spec;
  last_accept_length_ = verify_steps > 0 ? double(accepted + verify_steps) / double(verify_steps) : 0.0;
  last_accept_rate_ = drafts > 0 ? double(accepted) / double(drafts) : 0.0;
  if (!options_.log_batches) return;  // Step() publishes the stats
  const int64_t tokens = scheduler_.running_kv_tokens();
  PublishStats();
  const EngineStatsSnapshot s = stats();
  char accept[64] = "";
  if (options_.speculative()) {
    std::snprintf(accept, sizeof(accept), "accept len: %.2f, accept rate: %.2f, ", last_accept_length_,
                  last_accept_rate_);
  }
  Log(LogLevel::kInfo, "Decode batch, #running-req: %d, #token: %" PRId64 ", token usage: %.2f, "
      "%sgen throughput (token/s): %.2f, #queue-req: %d,",
      scheduler_.num_running(), tokens, s.token_usage, accept, last_gen_throughput_, scheduler_.num_waiting());
}

void Engine::PublishStats() {
  const int64_t capacity = allocator_.capacity_tokens();
  const int64_t evictable = scheduler_.evictable_pages();
  const int64_t used = capacity - (allocator_.num_free_pages() + evictable) * allocator_.page_size();
  max_running_seen_ = std::max<int64_t>(max_running_seen_, int64_t(scheduler_.num_running()));
  const SchedulerCounters& counters = scheduler_.counters();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.num_running_reqs = int64_t(scheduler_.num_running());
  stats_.num_queue_reqs = int64_t(scheduler_.num_waiting());
  stats_.num_used_tokens = used;
  stats_.token_usage = capacity > 0 ? double(used) / double(capacity) : 0.0;
  stats_.gen_throughput = last_gen_throughput_;
  stats_.prompt_tokens_total = counters.prompt_tokens_total;
  stats_.generation_tokens_total = generation_tokens_total_;
  stats_.cached_tokens_total = counters.cached_tokens_total;
  stats_.cache_hit_rate = counters.prompt_tokens_total > 0
                              ? double(counters.cached_tokens_total) / double(counters.prompt_tokens_total)
                              : 0.0;
  stats_.num_requests_total = requests_total_;
  stats_.num_aborted_requests_total = aborted_total_;
  stats_.num_retracted_reqs = retracted_last_interval_;
  stats_.num_retracted_requests_total = counters.retracted_total;
  stats_.max_running_reqs_seen = max_running_seen_;
  const OutputProcessor::SpecCounters& spec = output_.spec_counters();
  stats_.spec_accept_length = last_accept_length_;
  stats_.spec_accept_rate = last_accept_rate_;
  stats_.spec_verify_steps_total = spec.verify_steps;
  stats_.spec_draft_tokens_total = spec.draft_tokens;
  stats_.spec_accepted_tokens_total = spec.accepted_tokens;
  stats_.spec_draft_errors_total = draft_errors_;
  stats_.spec_draft_cap = step_tuner_ ? step_tuner_->cap() : -1;
  stats_.spec_tuning_rounds_total = tuning_rounds_;
}

EngineStatsSnapshot Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace mlaserve
