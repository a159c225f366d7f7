#include "engine/engine.h"

#include <algorithm>
#include <cinttypes>
#include <limits>

#include "core/check.h"
#include "core/function_ref.h"
#include "core/log.h"

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

// SGLang's constants: admission reserves at most this many future tokens per request, and a
// retraction leaves room for this many more decode steps per remaining request.
constexpr int kMaxReservedNewTokens = 4096;
// Prompt tokens a request that wants prompt logprobs prefills per step (each needs a row of
// logits; the buffer is sized for this many beyond one row per running request).
constexpr int kLogprobChunkTokens = 64;
constexpr int kRetractDecodeSteps = 20;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Engine::Engine(Model& model, const KernelSet& kernels, KvPool& pool, const EngineOptions& options,
               const Tokenizer* tokenizer)
    : model_(model),
      kernels_(kernels),
      pool_(pool),
      options_(options),
      sampler_(model.config().vocab_size),
      tokenizer_(tokenizer),
      batch_tokens_(size_t(model.max_batch_tokens())),
      batch_logits_(size_t(std::max(1, options.max_running_requests) + kLogprobChunkTokens) *
                    size_t(model.config().vocab_size)) {
  options_.max_running_requests =
      std::max(1, std::min(options_.max_running_requests, model.max_batch_tokens()));
  batch_segments_.reserve(size_t(options_.max_running_requests));
  scratch_order_.reserve(size_t(options_.max_running_requests));
  step_decodes_.reserve(size_t(options_.max_running_requests));
  step_prefills_.reserve(size_t(options_.max_running_requests));
  step_prefill_lengths_.reserve(size_t(options_.max_running_requests));
  if (!options_.disable_radix_cache) radix_ = std::make_unique<RadixCache>(pool_);
  const double c = std::max(0.0, options_.schedule_conservativeness);
  new_token_ratio_ = std::min(1.0, 0.7 * c);
  min_new_token_ratio_ = std::min(new_token_ratio_, 0.14 * c);
  new_token_ratio_decay_ = (new_token_ratio_ - min_new_token_ratio_) / 600.0;
  stats_.max_total_num_tokens = pool_.capacity_tokens();
  if (model.config().eos_token_id >= 0) eos_token_ids_.push_back(model.config().eos_token_id);
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
  while (!waiting_.empty()) {
    std::unique_ptr<Request> r = std::move(waiting_.front());
    waiting_.pop_front();
    Finish(*r, FinishReason::kAbort, "the server is shutting down");
  }
  for (auto& r : running_) Finish(*r, FinishReason::kAbort, "the server is shutting down");
  running_.clear();
  PublishStats();
}

Status Engine::Submit(GenerateRequest request, OutputCallback callback) {
  const ModelConfig& c = model_.config();
  if (request.input_ids.empty()) return Status::Error("the prompt is empty");
  for (TokenId id : request.input_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return Status::Error("input token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(c.vocab_size) + ")");
    }
  }
  MLA_RETURN_IF_ERROR(Validate(request.sampling, c.vocab_size));
  if (request.logprob_start_len >= int(request.input_ids.size())) {
    return Status::Error("logprob_start_len " + std::to_string(request.logprob_start_len) +
                         " must be below the prompt length " + std::to_string(request.input_ids.size()));
  }
  const int64_t total = int64_t(request.input_ids.size()) + request.sampling.max_new_tokens;
  if (total > model_.max_context()) {
    return Status::Error("the prompt (" + std::to_string(request.input_ids.size()) +
                         " tokens) plus max_new_tokens (" + std::to_string(request.sampling.max_new_tokens) +
                         ") exceeds the context length " + std::to_string(model_.max_context()));
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
  r->kv = std::make_unique<SequenceKv>(pool_, model_.max_context());
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
    const bool has_work = !waiting_.empty() || !running_.empty();
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
  for (auto& r : taken.requests) waiting_.push_back(std::move(r));
  for (const std::string& rid : taken.aborts) AbortRequest(rid, "aborted by the client");
  for (auto& flush : taken.flushes) flush.set_value(FlushCacheNow());
}

FlushCacheResult Engine::FlushCacheNow() {
  FlushCacheResult result{.num_running_reqs = int64_t(running_.size()), .num_queue_reqs = int64_t(waiting_.size())};
  result.flushed = running_.empty() && waiting_.empty();
  if (radix_ && result.flushed) {
    const int64_t before = radix_->cached_tokens();
    // Only running requests lock cached pages (a queued one gives its match back), so this
    // cannot be refused here.
    MLA_CHECK(radix_->Reset().ok());
    result.freed_tokens = before - radix_->cached_tokens();
  }
  if (radix_) {
    result.cached_tokens = radix_->cached_tokens();
    result.locked_tokens = radix_->locked_pages() * radix_->page_size();
  }
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
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->spec.rid == rid) {
      std::unique_ptr<Request> r = std::move(*it);
      waiting_.erase(it);
      Finish(*r, FinishReason::kAbort, why);
      return;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->spec.rid == rid) {
      std::unique_ptr<Request> r = std::move(*it);
      running_.erase(it);
      Finish(*r, FinishReason::kAbort, why);
      return;
    }
  }
}

// ---- capacity step ---------------------------------------------------------------------------

bool Engine::EnsureFreePages(int64_t pages) {
  if (pool_.num_free_pages() >= pages) return true;
  if (radix_) radix_->Evict(pages - pool_.num_free_pages());
  return pool_.num_free_pages() >= pages;
}

int64_t Engine::ReservedFutureTokens() const {
  double reserved = 0;
  for (const auto& r : running_) {
    const int remaining = r->spec.sampling.max_new_tokens - r->num_output_tokens();
    reserved += std::min(remaining, kMaxReservedNewTokens) * new_token_ratio_ + r->pending_tokens();
  }
  return int64_t(reserved);
}

int64_t Engine::DecodePagesNeeded() const {
  int64_t pages = 0;
  for (const auto& r : running_) {
    if (r->decoding() && r->kv->reserved_tokens() < r->kv->num_tokens() + 1) ++pages;
  }
  return pages;
}

void Engine::ReserveDecodeSlots() {
  if (!EnsureFreePages(DecodePagesNeeded())) {
    RetractUntil([&] { return EnsureFreePages(DecodePagesNeeded()); });
  }
  for (const auto& r : running_) {
    if (r->decoding()) MLA_CHECK(r->kv->Reserve(1).ok());
  }
}

void Engine::RetractUntil(FunctionRef<bool()> fits) {
  // Fewest output tokens first, then the longest input: the cheapest to recompute. At least
  // one request keeps running, so the engine always makes progress.
  std::vector<Request*> order;
  for (auto& r : running_) order.push_back(r.get());
  std::sort(order.begin(), order.end(), [](const Request* a, const Request* b) {
    if (a->num_output_tokens() != b->num_output_tokens()) return a->num_output_tokens() < b->num_output_tokens();
    return a->spec.input_ids.size() > b->spec.input_ids.size();
  });
  const double old_ratio = new_token_ratio_;
  int retracted = 0;
  for (Request* victim : order) {
    if (running_.size() <= 1 || fits()) break;
    ReleaseKv(*victim, /*cache_prefix=*/true);
    ++retracted;
    auto it = std::find_if(running_.begin(), running_.end(), [&](auto& p) { return p.get() == victim; });
    waiting_.push_front(std::move(*it));
    running_.erase(it);
  }
  if (retracted == 0) return;
  // Leave room for kRetractDecodeSteps more decode steps of every survivor.
  double decoded = 0, max_new = 0;
  for (const auto& r : running_) {
    decoded += r->num_output_tokens() + kRetractDecodeSteps;
    max_new += r->spec.sampling.max_new_tokens;
  }
  if (max_new > 0) new_token_ratio_ = std::min(1.0, decoded / max_new);
  retracted_total_ += retracted;
  retracted_in_interval_ += retracted;
  if (options_.log_batches) {
    Log(LogLevel::kWarning, "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
        retracted, old_ratio, new_token_ratio_);
  }
}

void Engine::MatchPrefix(Request& r) {
  if (!radix_ || r.kv->num_tokens() > 0 || r.wants_input_logprobs()) return;
  // At least one token must run through the model to produce logits.
  auto match = radix_->MatchPrefix(r.tokens, int(r.tokens.size()) - 1);
  if (match.num_tokens == 0) return;
  radix_->Lock(match.node);
  r.locked_prefix = match.node;
  MLA_CHECK(r.kv->AdoptPrefix(match.pages, int(match.num_tokens)).ok());
}

int64_t Engine::PagesToCover(const Request& r, int chunk) const {
  const int page_size = pool_.page_size();
  return (r.kv->num_tokens() + chunk + page_size - 1) / page_size - int64_t(r.kv->pages().size());
}

int Engine::ChunkFor(const Request& r, int budget, bool& logprob_segment_used) const {
  int chunk = std::min(r.pending_tokens(), budget);
  if (r.wants_input_logprobs() && r.kv->num_tokens() < int(r.spec.input_ids.size())) {
    if (logprob_segment_used) return 0;
    logprob_segment_used = true;
    chunk = std::min(chunk, kLogprobChunkTokens);
  }
  return chunk;
}

std::vector<Request*> Engine::AdmitWaiting(int token_budget, bool& logprob_segment_used,
                                           std::vector<int>& chunks) {
  std::vector<Request*> admitted;
  chunks.clear();
  if (waiting_.empty()) return admitted;
  if (options_.schedule_policy == SchedulePolicy::kLpm && radix_) {
    // Longest cached prefix first (stable: FCFS among equals).
    std::vector<std::pair<int, size_t>> keyed;
    for (size_t i = 0; i < waiting_.size(); ++i) {
      keyed.emplace_back(radix_->MatchPrefix(waiting_[i]->tokens, int(waiting_[i]->tokens.size()) - 1).num_tokens, i);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::deque<std::unique_ptr<Request>> sorted;
    for (auto& [len, i] : keyed) sorted.push_back(std::move(waiting_[i]));
    waiting_ = std::move(sorted);
  }
  const int page_size = pool_.page_size();
  int64_t available = (pool_.num_free_pages() + (radix_ ? radix_->evictable_pages() : 0)) * page_size -
                      ReservedFutureTokens();
  int prefill_tokens = 0;
  while (!waiting_.empty() && int(running_.size()) < options_.max_running_requests &&
         token_budget > 0 && prefill_tokens < options_.max_prefill_tokens) {
    Request& r = *waiting_.front();
    MatchPrefix(r);
    const int extend = r.pending_tokens();
    const int remaining_new = r.spec.sampling.max_new_tokens - r.num_output_tokens();
    const int64_t need = extend + int64_t(std::min(remaining_new, kMaxReservedNewTokens) * new_token_ratio_);
    const int chunk = ChunkFor(r, token_budget, logprob_segment_used);
    const int64_t chunk_pages = PagesToCover(r, chunk);
    if (chunk == 0 || (need > available && !running_.empty()) || !EnsureFreePages(chunk_pages)) {
      // Does not fit now: give back the prefix lock and wait.
      if (r.locked_prefix) {
        r.kv->Release();
        radix_->Unlock(*r.locked_prefix);
        r.locked_prefix.reset();
      }
      break;
    }
    MLA_CHECK(r.kv->Reserve(chunk).ok());
    if (!r.admitted_once) {
      r.admitted_once = true;
      r.cached_tokens = r.kv->num_tokens();
      prompt_tokens_total_ += int64_t(r.spec.input_ids.size());
      cached_tokens_total_ += r.cached_tokens;
    }
    if (!r.first_scheduled_time) r.first_scheduled_time = Clock::now();
    available -= need;
    token_budget -= chunk;
    prefill_tokens += extend;
    admitted.push_back(&r);
    chunks.push_back(chunk);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (chunk < extend) break;  // the chunked request ends this step's admissions
  }
  return admitted;
}

// ---- one step --------------------------------------------------------------------------------

bool Engine::Step() {
  TakeIntake();
  if (waiting_.empty() && running_.empty()) {
    PublishStats();
    return false;
  }
  ReserveDecodeSlots();

  // Batch step: every decoding request contributes one token; prefill chunks share the rest of
  // the token budget (--chunked-prefill-size), running prefills first, then new admissions.
  std::vector<Request*>& decodes = step_decodes_;
  std::vector<Request*>& prefills = step_prefills_;
  std::vector<int>& prefill_lengths = step_prefill_lengths_;
  decodes.clear();
  prefills.clear();
  prefill_lengths.clear();
  int budget = model_.max_batch_tokens();
  for (auto& r : running_) {
    if (r->decoding()) {
      decodes.push_back(r.get());
      --budget;
    }
  }
  if (options_.chunked_prefill_size > 0) budget = std::min(budget, options_.chunked_prefill_size);
  bool logprob_segment_used = false;
  for (auto& r : running_) {
    if (r->decoding() || budget <= 0) continue;
    const int chunk = ChunkFor(*r, budget, logprob_segment_used);
    if (chunk == 0) continue;
    if (!EnsureFreePages(PagesToCover(*r, chunk))) continue;
    MLA_CHECK(r->kv->Reserve(chunk).ok());
    prefills.push_back(r.get());
    prefill_lengths.push_back(chunk);
    budget -= chunk;
  }
  int new_seqs = 0, new_tokens = 0, cached = 0;
  std::vector<int>& admitted_chunks = step_admitted_chunks_;
  const std::vector<Request*> admitted = AdmitWaiting(budget, logprob_segment_used, admitted_chunks);
  for (size_t i = 0; i < admitted.size(); ++i) {
    Request* r = admitted[i];
    const int chunk = admitted_chunks[i];
    prefills.push_back(r);
    prefill_lengths.push_back(chunk);
    budget -= chunk;
    ++new_seqs;
    new_tokens += chunk;
    cached += r->kv->num_tokens();
  }
  if (decodes.empty() && prefills.empty()) {
    if (running_.empty()) {
      // Nothing fits: the head of the queue waits for memory that running requests will free.
      PublishStats();
      return false;
    }
    // Running prefills that cannot get pages and nothing decoding: retract until the first one
    // fits, so the engine never stalls.
    Request* head = running_.front().get();
    const int chunk = std::min(head->pending_tokens(), std::max(1, options_.chunked_prefill_size > 0
                                                                      ? options_.chunked_prefill_size
                                                                      : model_.max_batch_tokens()));
    RetractUntil([&] { return EnsureFreePages(PagesToCover(*head, chunk)); });
    PublishStats();
    return true;
  }
  RunBatch(decodes, prefills, prefill_lengths);
  if (!prefills.empty() && options_.log_batches && new_seqs > 0) LogPrefill(new_seqs, new_tokens, cached);
  if (!decodes.empty()) {
    ++decode_steps_;
    new_token_ratio_ = std::max(min_new_token_ratio_, new_token_ratio_ - new_token_ratio_decay_);
    if (decode_steps_ % std::max(1, options_.decode_log_interval) == 0) EndDecodeInterval();
  }
  // Sweep finished requests.
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& r) { return r->finish_reason != FinishReason::kNone; }),
                 running_.end());
  PublishStats();
  return true;
}

void Engine::RunBatch(const std::vector<Request*>& decodes, const std::vector<Request*>& prefills,
                      const std::vector<int>& prefill_lengths) {
  batch_segments_.clear();
  std::vector<Request*>& order = scratch_order_;
  std::vector<int>& first_row = scratch_rows_;  // each segment's first logits row
  std::vector<int>& from = scratch_from_;       // each segment's first position
  order.clear();
  first_row.clear();
  from.clear();
  size_t n = 0;
  int rows = 0;
  auto add = [&](Request* r, int count) {
    const int start = r->kv->num_tokens();
    std::copy(r->tokens.begin() + start, r->tokens.begin() + start + count, batch_tokens_.begin() + int64_t(n));
    n += size_t(count);
    // Prompt logprobs need a row for every prompt token of the chunk (ChunkFor capped it).
    const bool all_logits = r->wants_input_logprobs() && start < int(r->spec.input_ids.size());
    batch_segments_.push_back(ForwardSegment{r->kv.get(), count, all_logits});
    order.push_back(r);
    first_row.push_back(rows);
    from.push_back(start);
    rows += all_logits ? count : 1;
  };
  for (Request* r : decodes) add(r, 1);
  for (size_t i = 0; i < prefills.size(); ++i) add(prefills[i], prefill_lengths[i]);
  const Status s = model_.Forward(kernels_, std::span(batch_tokens_).first(n), batch_segments_,
                                  LogitsMode::kLastPerSegment, batch_logits_.data());
  if (!s.ok()) {
    // Inputs were validated at Submit; a failure here is a bug, but never take the server down:
    // fail the batch's requests with the reason.
    for (Request* r : order) Finish(*r, FinishReason::kAbort, "internal error: " + s.message());
    return;
  }
  const int vocab = model_.config().vocab_size;
  for (size_t i = 0; i < order.size(); ++i) {
    Request& r = *order[i];
    const ForwardSegment& seg = batch_segments_[i];
    if (seg.all_logits) CollectInputLogprobs(r, from[i], seg.num_tokens, batch_logits_.data() + size_t(first_row[i]) * vocab);
    if (r.pending_tokens() != 0) continue;  // a prefill chunk that is not the prompt's last
    if (r.spec.sampling.max_new_tokens == 0) {
      Finish(r, FinishReason::kLength);  // prefill only (e.g. to warm the prefix cache)
      continue;
    }
    const int last_row = first_row[i] + (seg.all_logits ? seg.num_tokens - 1 : 0);
    const float* logits = batch_logits_.data() + size_t(last_row) * vocab;
    const SampleContext context{.position = int64_t(r.tokens.size()),
                                .seed = r.seed,
                                .output_history = &r.penalties,
                                .eos_token_ids = eos_token_ids_};
    LogprobResult logprob;
    const TokenId token = sampler_.Sample(std::span(logits, size_t(vocab)), r.spec.sampling, context,
                                          r.spec.sampling.return_logprob ? &logprob : nullptr);
    AfterToken(r, token, r.spec.sampling.return_logprob ? &logprob : nullptr);
  }
}

void Engine::CollectInputLogprobs(Request& r, int first_position, int count, const float* logits) {
  const int vocab = model_.config().vocab_size;
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
  if (out >= p.max_new_tokens || int(r.tokens.size()) >= model_.max_context()) {
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
  ReleaseKv(r, /*cache_prefix=*/true);
  ++requests_total_;
  if (reason == FinishReason::kAbort) ++aborted_total_;
  {
    std::lock_guard<std::mutex> lock(intake_mutex_);
    live_rids_.erase(r.spec.rid);
  }
  Stream(r, /*finished=*/true, error);
}

void Engine::ReleaseKv(Request& r, bool cache_prefix) {
  SequenceKv& kv = *r.kv;
  if (radix_ && cache_prefix) {
    // The cache takes the full pages (recognising the borrowed ones as its own and freeing any
    // duplicates); Release then frees the partial last page and unused reservations.
    const int page_size = pool_.page_size();
    const std::span<const PageId> pages = kv.HandOverPages(kv.num_tokens() / page_size);
    radix_->Insert(std::span(r.tokens).first(pages.size() * size_t(page_size)), pages);
  }
  if (r.locked_prefix) {
    radix_->Unlock(*r.locked_prefix);
    r.locked_prefix.reset();
  }
  kv.Release();
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

void Engine::LogPrefill(int new_seqs, int new_tokens, int cached_tokens) {
  const EngineStatsSnapshot s = stats();
  Log(LogLevel::kInfo, "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, token usage: %.2f, "
      "#running-req: %zu, #queue-req: %zu,",
      new_seqs, new_tokens, cached_tokens, s.token_usage, running_.size(), waiting_.size());
}

void Engine::EndDecodeInterval() {
  const Clock::time_point now = Clock::now();
  const double elapsed = Seconds(last_decode_log_, now);
  last_gen_throughput_ = elapsed > 0 ? double(tokens_since_log_) / elapsed : 0.0;
  last_decode_log_ = now;
  tokens_since_log_ = 0;
  retracted_last_interval_ = retracted_in_interval_;
  retracted_in_interval_ = 0;
  if (!options_.log_batches) return;  // Step() publishes the stats
  int64_t tokens = 0;
  for (const auto& r : running_) tokens += r->kv->num_tokens();
  PublishStats();
  const EngineStatsSnapshot s = stats();
  Log(LogLevel::kInfo, "Decode batch, #running-req: %zu, #token: %" PRId64 ", token usage: %.2f, "
      "gen throughput (token/s): %.2f, #queue-req: %zu,",
      running_.size(), tokens, s.token_usage, last_gen_throughput_, waiting_.size());
}

void Engine::PublishStats() {
  const int64_t capacity = pool_.capacity_tokens();
  const int64_t evictable = radix_ ? radix_->evictable_pages() : 0;
  const int64_t used = capacity - (pool_.num_free_pages() + evictable) * pool_.page_size();
  max_running_seen_ = std::max<int64_t>(max_running_seen_, int64_t(running_.size()));
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.num_running_reqs = int64_t(running_.size());
  stats_.num_queue_reqs = int64_t(waiting_.size());
  stats_.num_used_tokens = used;
  stats_.token_usage = capacity > 0 ? double(used) / double(capacity) : 0.0;
  stats_.gen_throughput = last_gen_throughput_;
  stats_.prompt_tokens_total = prompt_tokens_total_;
  stats_.generation_tokens_total = generation_tokens_total_;
  stats_.cached_tokens_total = cached_tokens_total_;
  stats_.cache_hit_rate = prompt_tokens_total_ > 0 ? double(cached_tokens_total_) / double(prompt_tokens_total_) : 0.0;
  stats_.num_requests_total = requests_total_;
  stats_.num_aborted_requests_total = aborted_total_;
  stats_.num_retracted_reqs = retracted_last_interval_;
  stats_.num_retracted_requests_total = retracted_total_;
  stats_.max_running_reqs_seen = max_running_seen_;
}

EngineStatsSnapshot Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace mlaserve
