#include "engine/engine.h"

#include <algorithm>
#include <cinttypes>
#include <limits>

#include "core/check.h"
#include "engine/log_line.h"

namespace mlaserve {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "none";
}

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// max_running_requests is at least 1 and at most one decode token per batch slot.
EngineOptions Clamped(EngineOptions options, int max_batch_tokens) {
  options.max_running_requests = std::max(1, std::min(options.max_running_requests, max_batch_tokens));
  return options;
}

}  // namespace

Engine::Engine(ModelRunner& runner, KvPool& pool, const EngineOptions& options, const Tokenizer* tokenizer)
    : runner_(runner),
      pool_(pool),
      options_(Clamped(options, runner.info().max_batch_tokens)),
      scheduler_(pool, options_, runner.info().max_batch_tokens),
      sampler_(runner.info().vocab_size),
      tokenizer_(tokenizer) {
  runner_.ReserveLogitsRows(options_.max_running_requests + kLogprobChunkTokens);
  stats_.max_total_num_tokens = pool_.capacity_tokens();
  if (runner.info().eos_token_id >= 0) eos_token_ids_.push_back(runner.info().eos_token_id);
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), *tokenizer_->eos_id()) == eos_token_ids_.end()) {
    eos_token_ids_.push_back(*tokenizer_->eos_id());
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
  const int64_t total = int64_t(request.input_ids.size()) + request.sampling.max_new_tokens;
  if (total > model.max_context) {
    return Status::Error("the prompt (" + std::to_string(request.input_ids.size()) +
                         " tokens) plus max_new_tokens (" + std::to_string(request.sampling.max_new_tokens) +
                         ") exceeds the context length " + std::to_string(model.max_context));
  }
  if (total > pool_.capacity_tokens()) {
    return Status::Error("the request needs " + std::to_string(total) +
                         " tokens of KV cache, more than the whole pool holds (max_total_num_tokens=" +
                         std::to_string(pool_.capacity_tokens()) + ")");
  }
  auto r = std::make_unique<Request>();
  r->spec = std::move(request);
  r->callback = std::move(callback);
  r->tokens = r->spec.input_ids;
  r->tokens.reserve(size_t(total));
  r->kv = std::make_unique<SequenceKv>(pool_, model.max_context);
  r->penalties = PenaltyState(r->spec.sampling.max_new_tokens);
  if (r->spec.logprob_start_len == 0) {
    r->input_logprobs.push_back(std::numeric_limits<float>::quiet_NaN());  // no context
    r->input_top_logprobs.emplace_back();
  }
  if (tokenizer_) {
    r->decoder.emplace(*tokenizer_, r->spec.sampling.skip_special_tokens);
    if (!r->spec.sampling.stop.empty()) {
      r->stop_matcher.emplace(r->spec.sampling.stop, r->spec.sampling.no_stop_trim);
    }
  } else if (!r->spec.sampling.stop.empty()) {
    return Status::Error("stop strings need a tokenizer");
  }
  r->submit_time = Clock::now();
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
    LogLine("Cache flushed successfully! #freed-token: %" PRId64, result.freed_tokens);
  } else {
    LogLine("Cache not flushed because there are pending requests. #queue-req: %" PRId64 ", #running-req: %" PRId64,
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
  const Result<ModelRunnerOutput> out = runner_.Execute(scheduler_.plan());
  if (out.ok()) {
    scheduler_.RecordComputed();
    ProcessOutputs(out->logits);
  } else {
    // Inputs were validated at Submit; a failure here is a bug, but never take the server down:
    // fail the batch's requests with the reason.
    for (Request* r : scheduler_.planned_requests()) {
      Finish(*r, FinishReason::kAbort, "internal error: " + out.status().message());
    }
  }
  const AdmissionSummary& admission = scheduler_.admission();
  if (options_.log_batches && admission.new_seqs > 0) LogPrefill(admission);
  if (admission.num_decodes > 0 && scheduler_.EndDecodeStep()) EndDecodeInterval();
  scheduler_.SweepFinished();
  PublishStats();
  return true;
}

void Engine::ProcessOutputs(std::span<const float> logits) {
  const BatchPlan& plan = scheduler_.plan();
  const std::span<Request* const> requests = scheduler_.planned_requests();
  const size_t vocab = size_t(runner_.info().vocab_size);
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = *requests[i];
    const PlannedSequence& seq = plan.sequences[i];
    const float* rows = logits.data() + size_t(seq.first_logits_row) * vocab;
    if (seq.all_logits) CollectInputLogprobs(r, seq.num_computed_tokens, seq.num_new_tokens, rows);
    if (r.pending_tokens() != 0) continue;  // a prefill chunk that is not the prompt's last
    if (r.spec.sampling.max_new_tokens == 0) {
      Finish(r, FinishReason::kLength);  // prefill only (e.g. to warm the prefix cache)
      continue;
    }
    const float* last = rows + size_t(seq.num_logits_rows() - 1) * vocab;
    const SampleContext context{.position = int64_t(r.tokens.size()),
                                .seed = r.seed,
                                .output_history = &r.penalties,
                                .eos_token_ids = eos_token_ids_};
    LogprobResult logprob;
    const TokenId token = sampler_.Sample(std::span(last, vocab), r.spec.sampling, context,
                                          r.spec.sampling.return_logprob ? &logprob : nullptr);
    AfterToken(r, token, r.spec.sampling.return_logprob ? &logprob : nullptr);
  }
}

void Engine::CollectInputLogprobs(Request& r, int first_position, int count, const float* logits) {
  const int vocab = runner_.info().vocab_size;
  const int prompt_len = int(r.spec.input_ids.size());
  for (int j = 0; j < count; ++j) {
    // The row at position p predicts the token at p + 1.
    const int next = first_position + j + 1;
    if (next >= prompt_len || next < std::max(1, r.spec.logprob_start_len)) continue;
    // Entry k is the token at logprob_start_len + k; a recomputation after retraction must not
    // append what is already there.
    if (size_t(next - r.spec.logprob_start_len) != r.input_logprobs.size()) continue;
    LogprobResult lp;
    ComputeLogprobs(std::span(logits + size_t(j) * vocab, size_t(vocab)), 1.0f, r.spec.input_ids[size_t(next)],
                    r.spec.sampling.top_logprobs_num, lp);
    r.input_logprobs.push_back(lp.chosen.logprob);
    r.input_top_logprobs.push_back(std::move(lp.top));
  }
}

void Engine::AfterToken(Request& r, TokenId token, LogprobResult* logprob) {
  const SamplingParams& p = r.spec.sampling;
  r.tokens.push_back(token);
  r.penalties.Add(token);
  ++generation_tokens_total_;
  ++tokens_since_log_;
  if (!r.first_token_time) r.first_token_time = Clock::now();
  if (logprob != nullptr) {
    r.pending_logprobs.push_back(logprob->chosen.logprob);
    if (p.top_logprobs_num > 0) r.pending_top_logprobs.push_back(std::move(logprob->top));
  }
  const int out = r.num_output_tokens();
  if (out >= p.min_new_tokens && IsStopToken(p, eos_token_ids_, token)) {
    r.matched_stop_token = token;
    return Finish(r, FinishReason::kStop);
  }
  if (r.decoder && AppendText(r, r.decoder->Push(token))) return Finish(r, FinishReason::kStop);
  if (out >= p.max_new_tokens || int(r.tokens.size()) >= runner_.info().max_context) {
    return Finish(r, FinishReason::kLength);
  }
  Stream(r, /*finished=*/false);
}

bool Engine::AppendText(Request& r, std::string_view piece) {
  if (!r.stop_matcher) {
    r.pending_text.append(piece);
    return false;
  }
  r.pending_text.append(r.stop_matcher->Push(piece));
  if (!r.stop_matcher->stopped()) return false;
  r.matched_stop_string = r.spec.sampling.stop[size_t(r.stop_matcher->matched_index())];
  return true;
}

void Engine::Finish(Request& r, FinishReason reason, const std::string& error) {
  r.finish_reason = reason;
  if (r.decoder && r.matched_stop_string.empty()) {
    // Flush what the decoder and the stop matcher still hold.
    if (!AppendText(r, r.decoder->Flush()) && r.stop_matcher) r.pending_text.append(r.stop_matcher->Finish());
  }
  scheduler_.ReleaseKv(r, /*cache_prefix=*/true);
  ++requests_total_;
  if (reason == FinishReason::kAbort) ++aborted_total_;
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    live_rids_.erase(r.spec.rid);
  }
  Stream(r, /*finished=*/true, error);
}

void Engine::Stream(Request& r, bool finished, const std::string& error) {
  RequestOutput out;
  out.rid = r.spec.rid;
  out.new_token_ids.assign(r.tokens.begin() + int64_t(r.spec.input_ids.size()) + r.num_streamed, r.tokens.end());
  out.new_token_logprobs = std::move(r.pending_logprobs);
  r.pending_logprobs.clear();
  out.new_top_logprobs = std::move(r.pending_top_logprobs);
  r.pending_top_logprobs.clear();
  const size_t expected_input = r.spec.logprob_start_len >= 0
                                    ? r.spec.input_ids.size() - size_t(r.spec.logprob_start_len) : 0;
  if (!r.input_logprobs_sent && expected_input > 0 && (r.input_logprobs.size() == expected_input || finished)) {
    out.input_token_ids.assign(r.spec.input_ids.begin() + r.spec.logprob_start_len, r.spec.input_ids.end());
    out.input_token_logprobs = std::move(r.input_logprobs);
    out.input_top_logprobs = std::move(r.input_top_logprobs);
    r.input_logprobs_sent = true;
  }
  r.num_streamed = r.num_output_tokens();
  out.finished = finished;
  out.finish_reason = r.finish_reason;
  out.matched_stop_token = r.matched_stop_token;
  out.matched_stop_string = r.matched_stop_string;
  out.new_text = std::move(r.pending_text);
  r.pending_text.clear();
  out.error = error;
  out.prompt_tokens = int(r.spec.input_ids.size());
  out.completion_tokens = r.num_output_tokens();
  out.cached_tokens = r.cached_tokens;
  const Clock::time_point now = Clock::now();
  if (r.first_scheduled_time) out.queue_time_s = Seconds(r.submit_time, *r.first_scheduled_time);
  if (r.first_token_time) out.ttft_s = Seconds(r.submit_time, *r.first_token_time);
  out.e2e_latency_s = Seconds(r.submit_time, now);
  if (!finished && out.new_token_ids.empty() && out.new_text.empty()) return;
  if (r.callback) r.callback(std::move(out));
}

// ---- logs and counters -----------------------------------------------------------------------

void Engine::LogPrefill(const AdmissionSummary& admission) {
  const EngineStatsSnapshot s = stats();
  LogLine("Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
          "#running-req: %d, #queue-req: %d,",
          admission.new_seqs, admission.new_tokens, admission.cached_tokens, s.token_usage,
          scheduler_.num_running(), scheduler_.num_waiting());
}

void Engine::EndDecodeInterval() {
  const Clock::time_point now = Clock::now();
  const double elapsed = Seconds(last_decode_log_, now);
  last_gen_throughput_ = elapsed > 0 ? double(tokens_since_log_) / elapsed : 0.0;
  last_decode_log_ = now;
  tokens_since_log_ = 0;
  retracted_last_interval_ = scheduler_.TakeIntervalRetractions();
  if (!options_.log_batches) return;  // Step() publishes the stats
  const int64_t tokens = scheduler_.running_kv_tokens();
  PublishStats();
  const EngineStatsSnapshot s = stats();
  LogLine("Decode batch, #running-req: %d, #token: %" PRId64 ", token usage: %.2f, "
          "gen throughput (token/s): %.2f, #queue-req: %d,",
          scheduler_.num_running(), tokens, s.token_usage, last_gen_throughput_, scheduler_.num_waiting());
}

void Engine::PublishStats() {
  const int64_t capacity = pool_.capacity_tokens();
  const int64_t evictable = scheduler_.evictable_pages();
  const int64_t used = capacity - (pool_.num_free_pages() + evictable) * pool_.page_size();
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
}

EngineStatsSnapshot Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace mlaserve
