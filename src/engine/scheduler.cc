#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "engine/drafter.h"

namespace mlaserve {

namespace {

// SGLang's constants: admission reserves at most this many future tokens per request, and a
// retraction leaves room for this many more decode steps per remaining request.
constexpr int kMaxReservedNewTokens = 4096;
constexpr int kRetractDecodeSteps = 20;

}  // namespace

Scheduler::Scheduler(PageAllocator& allocator, const EngineOptions& options, int max_batch_tokens, const Clock& clock)
    : allocator_(allocator), clock_(clock), options_(options), max_batch_tokens_(max_batch_tokens) {
  planned_.reserve(size_t(options_.max_running_requests));
  plan_.sequences.reserve(size_t(options_.max_running_requests));
  plan_.tokens.reserve(size_t(max_batch_tokens_));
  step_decodes_.reserve(size_t(options_.max_running_requests));
  step_prefills_.reserve(size_t(options_.max_running_requests));
  step_prefill_lengths_.reserve(size_t(options_.max_running_requests));
  if (!options_.disable_radix_cache) radix_ = std::make_unique<RadixCache>(allocator_);
  const double c = std::max(0.0, options_.schedule_conservativeness);
  new_token_ratio_ = std::min(1.0, 0.7 * c);
  min_new_token_ratio_ = std::min(new_token_ratio_, 0.14 * c);
  new_token_ratio_decay_ = (new_token_ratio_ - min_new_token_ratio_) / 600.0;
}

void Scheduler::Enqueue(std::unique_ptr<Request> r) { waiting_.push_back(std::move(r)); }

std::unique_ptr<Request> Scheduler::Remove(const std::string& rid) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->spec.rid == rid) {
      std::unique_ptr<Request> r = std::move(*it);
      waiting_.erase(it);
      return r;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->spec.rid == rid) {
      std::unique_ptr<Request> r = std::move(*it);
      running_.erase(it);
      return r;
    }
  }
  return nullptr;
}

std::vector<std::unique_ptr<Request>> Scheduler::RemoveAll() {
  std::vector<std::unique_ptr<Request>> all;
  for (auto& r : waiting_) all.push_back(std::move(r));
  for (auto& r : running_) all.push_back(std::move(r));
  waiting_.clear();
  running_.clear();
  return all;
}

FlushCacheResult Scheduler::FlushCache() {
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
  return result;
}

int64_t Scheduler::running_kv_tokens() const {
  int64_t tokens = 0;
  for (const auto& r : running_) tokens += r->kv->num_tokens();
  return tokens;
}

int64_t Scheduler::TakeIntervalRetractions() { return std::exchange(retracted_in_interval_, 0); }

// ---- capacity step ---------------------------------------------------------------------------

bool Scheduler::EnsureFreePages(int64_t pages) {
  if (allocator_.num_free_pages() >= pages) return true;
  if (radix_) radix_->Evict(pages - allocator_.num_free_pages());
  return allocator_.num_free_pages() >= pages;
}

int64_t Scheduler::ReservedFutureTokens() const {
  double reserved = 0;
  for (const auto& r : running_) {
    const int remaining = r->spec.sampling.max_new_tokens - r->num_output_tokens();
    reserved += std::min(remaining, kMaxReservedNewTokens) * new_token_ratio_ + r->pending_tokens();
  }
  return int64_t(reserved);
}

int64_t Scheduler::DecodePagesNeeded() const {
  int64_t pages = 0;
  for (const auto& r : running_) {
    if (r->decoding() && r->kv->reserved_tokens() < r->kv->num_tokens() + 1) ++pages;
  }
  return pages;
}

void Scheduler::ReserveDecodeSlots() {
  if (!EnsureFreePages(DecodePagesNeeded())) {
    RetractUntil([&] { return EnsureFreePages(DecodePagesNeeded()); });
  }
  for (const auto& r : running_) {
    if (r->decoding()) MLA_CHECK(r->kv->Reserve(1).ok());
  }
}

void Scheduler::RetractUntil(FunctionRef<bool()> fits) {
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
    // fits() first: it evicts the prefix cache, which the last victim's pages may just have
    // joined (with one request left, breaking before it would leave them unevicted).
    if (fits() || running_.size() <= 1) break;
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
  counters_.retracted_total += retracted;
  retracted_in_interval_ += retracted;
  if (options_.log_batches) {
    Log(LogLevel::kWarning, "KV cache pool is full. Retract requests. #retracted_reqs: %d, #new_token_ratio: %.4f -> %.4f",
        retracted, old_ratio, new_token_ratio_);
  }
}

void Scheduler::ReleaseKv(Request& r, bool cache_prefix) {
  DropRejectedDrafts(r);  // the prefix cache must never receive a rejected draft's rows
  SequenceKv& kv = *r.kv;
  if (radix_ && cache_prefix) {
    // The cache takes the full pages (recognising the borrowed ones as its own and freeing any
    // duplicates); Release then frees the partial last page and unused reservations.
    const int page_size = allocator_.page_size();
    const std::span<const PageId> pages = kv.HandOverPages(kv.num_tokens() / page_size);
    radix_->Insert(std::span(r.tokens).first(pages.size() * size_t(page_size)), pages);
  }
  if (r.locked_prefix) {
    radix_->Unlock(*r.locked_prefix);
    r.locked_prefix.reset();
  }
  kv.Release();
}

// ---- batch step ------------------------------------------------------------------------------

void Scheduler::MatchPrefix(Request& r) {
  if (!radix_ || r.kv->num_tokens() > 0 || r.wants_input_logprobs()) return;
  // At least one token must run through the model to produce logits.
  auto match = radix_->MatchPrefix(r.tokens, int(r.tokens.size()) - 1);
  if (match.num_tokens == 0) return;
  radix_->Lock(match.node);
  r.locked_prefix = match.node;
  MLA_CHECK(r.kv->AdoptPrefix(match.pages, int(match.num_tokens)).ok());
}

int64_t Scheduler::PagesToCover(const Request& r, int chunk) const {
  const int page_size = allocator_.page_size();
  return (r.kv->num_tokens() + chunk + page_size - 1) / page_size - int64_t(r.kv->pages().size());
}

int Scheduler::ChunkFor(const Request& r, int budget, bool& logprob_segment_used) const {
  int chunk = std::min(r.pending_tokens(), budget);
  if (r.wants_input_logprobs() && r.kv->num_tokens() < int(r.spec.input_ids.size())) {
    if (logprob_segment_used) return 0;
    logprob_segment_used = true;
    chunk = std::min(chunk, kLogprobChunkTokens);
  }
  return chunk;
}

void Scheduler::AdmitWaiting(int token_budget, bool& logprob_segment_used, std::vector<Request*>& admitted,
                             std::vector<int>& chunks) {
  admitted.clear();
  chunks.clear();
  if (waiting_.empty()) return;
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
  const int page_size = allocator_.page_size();
  int64_t available = (allocator_.num_free_pages() + (radix_ ? radix_->evictable_pages() : 0)) * page_size -
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
      counters_.prompt_tokens_total += int64_t(r.spec.input_ids.size());
      counters_.cached_tokens_total += r.cached_tokens;
    }
    if (!r.first_scheduled_time) r.first_scheduled_time = clock_.Now();
    available -= need;
    token_budget -= chunk;
    prefill_tokens += extend;
    admitted.push_back(&r);
    chunks.push_back(chunk);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (chunk < extend) break;  // the chunked request ends this step's admissions
  }
}

int Scheduler::Draft(Request& r, int budget) {
  r.draft_tokens.clear();
  // Greedy and sampled requests alike: the output processor's acceptance keeps either's output
  // what one-by-one decoding gives (docs/architecture.md, "Speculative sampling").
  if (!options_.speculative()) return 0;
  // The verify step appends at most drafts + 1 tokens, never more than the request may.
  const int remaining = r.spec.sampling.max_new_tokens - r.num_output_tokens();
  const int room = r.kv->max_tokens() - r.kv->num_tokens() - 1;
  // Rows the reserved and free pages hold past the token already granted (never evicting).
  const int64_t coverable =
      int64_t(r.kv->reserved_tokens()) + int64_t(allocator_.num_free_pages()) * allocator_.page_size() -
      r.kv->num_tokens() - 1;
  int limit = std::min(options_.num_draft_tokens, draft_cap_);
  if (options_.adaptive_drafts) {
    limit = r.draft_pause > 0 ? 0 : std::min(r.draft_limit, draft_cap_);
    if (r.draft_pause > 0) --r.draft_pause;
  } else {
    r.draft_limit = limit;  // (what a drafter that chains drafts computes after this step)
  }
  const int most = int(std::min<int64_t>({limit, budget, remaining - 1, room, coverable}));
  if (most > 0) {
    r.draft_tokens.resize(size_t(most));  // within the capacity reserved at Submit
    r.draft_tokens.resize(size_t(options_.drafter->Propose(r, r.draft_tokens)));
  }
  if (r.draft_tokens.empty()) {
    // No verify truncates this step: free look-ahead pages a drafter reserved (ModelDrafter's
    // chain), keeping the decode token's.
    r.kv->ReleasePagesPast(r.kv->num_tokens() + 1);
    return 0;
  }
  MLA_CHECK(r.kv->Reserve(1 + int(r.draft_tokens.size())).ok());
  return int(r.draft_tokens.size());
}

void Scheduler::AdaptDraftLimit(Request& r, int accepted) const {
  const int k = std::min(options_.num_draft_tokens, draft_cap_);
  if (accepted > 0) {  // one more than the run accepted, up to k
    r.draft_limit = std::min(k, accepted + 1);
    r.draft_misses = 0;
    r.draft_backoff = 0;
    return;
  }
  r.draft_limit = 1;
  if (++r.draft_misses < kDraftMissesBeforePause) return;
  r.draft_misses = 0;
  r.draft_backoff = std::clamp(r.draft_backoff * 2, kFirstDraftPause, kLongestDraftPause);
  r.draft_pause = r.draft_backoff;
}

void Scheduler::DropRejectedDrafts(Request& r) {
  if (r.draft_tokens.empty()) return;
  if (options_.adaptive_drafts) {
    // The step computed 1 + drafted rows; the kept ones are the history but its last token.
    const int drafted = int(r.draft_tokens.size());
    AdaptDraftLimit(r, int(r.tokens.size()) - 1 - (r.kv->num_tokens() - drafted));
  }
  r.draft_tokens.clear();
  r.kv->Truncate(std::min(r.kv->num_tokens(), int(r.tokens.size()) - 1));
}

void Scheduler::DropRejectedDrafts() {
  for (Request* r : planned_) DropRejectedDrafts(*r);
}

void Scheduler::AddToPlan(Request* r, int num_new_tokens) {
  const int start = r->kv->num_tokens();
  // Prompt logprobs need a row for every prompt token of the chunk (ChunkFor capped it).
  const bool all_logits = r->wants_input_logprobs() && start < int(r->spec.input_ids.size());
  plan_.Add(r->kv->pages(), start, std::span(r->tokens).subspan(size_t(start), size_t(num_new_tokens)), all_logits,
            r->draft_tokens);
  planned_.push_back(r);
  if (r->spec.capture_hidden_states) plan_.capture_hidden_states = true;
}

Scheduler::Outcome Scheduler::Schedule() {
  plan_.Clear();
  const DrafterInput input = options_.speculative() ? options_.drafter->input() : DrafterInput::kNone;
  plan_.return_hidden_states = input == DrafterInput::kFinalHidden;
  plan_.capture_hidden_states = input == DrafterInput::kCapturedLayers;
  planned_.clear();
  summary_ = {};
  if (waiting_.empty() && running_.empty()) return Outcome::kIdle;
  ReserveDecodeSlots();

  // Batch step: every decoding request contributes one token; prefill chunks share the rest of
  // the token budget (--chunked-prefill-size), running prefills first, then new admissions; what
  // is left goes to the decoding requests' drafts.
  std::vector<Request*>& decodes = step_decodes_;
  std::vector<Request*>& prefills = step_prefills_;
  std::vector<int>& prefill_lengths = step_prefill_lengths_;
  decodes.clear();
  prefills.clear();
  prefill_lengths.clear();
  int budget = max_batch_tokens_;
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
  AdmitWaiting(budget, logprob_segment_used, step_admitted_, step_admitted_chunks_);
  for (size_t i = 0; i < step_admitted_.size(); ++i) {
    Request* r = step_admitted_[i];
    const int chunk = step_admitted_chunks_[i];
    prefills.push_back(r);
    prefill_lengths.push_back(chunk);
    budget -= chunk;
    ++summary_.new_seqs;
    summary_.new_tokens += chunk;
    summary_.cached_tokens += r->kv->num_tokens();
  }
  // Drafts last: guesses take only the budget and free pages the prompts left, so they never
  // hold back an admission or make a prefill evict the prefix cache.
  for (Request* r : decodes) budget -= Draft(*r, budget);
  if (decodes.empty() && prefills.empty()) {
    if (running_.empty()) return Outcome::kBlocked;  // waits for memory that running requests free
    // Running prefills that cannot get pages and nothing decoding: retract until the first one
    // fits, so the engine never stalls.
    Request* head = running_.front().get();
    const int chunk = std::min(head->pending_tokens(), std::max(1, options_.chunked_prefill_size > 0
                                                                      ? options_.chunked_prefill_size
                                                                      : max_batch_tokens_));
    RetractUntil([&] { return EnsureFreePages(PagesToCover(*head, chunk)); });
    return Outcome::kRetracted;
  }
  summary_.num_decodes = int(decodes.size());
  for (Request* r : decodes) AddToPlan(r, 1);
  for (size_t i = 0; i < prefills.size(); ++i) AddToPlan(prefills[i], prefill_lengths[i]);
  return Outcome::kBatch;
}

void Scheduler::RecordComputed() {
  for (size_t i = 0; i < planned_.size(); ++i) planned_[i]->kv->MarkComputed(plan_.sequences[i].num_new_tokens);
}

bool Scheduler::EndDecodeStep() {
  ++decode_steps_;
  new_token_ratio_ = std::max(min_new_token_ratio_, new_token_ratio_ - new_token_ratio_decay_);
  return decode_steps_ % std::max(1, options_.decode_log_interval) == 0;
}

void Scheduler::SweepFinished() {
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& r) { return r->finish_reason != FinishReason::kNone; }),
                 running_.end());
}

}  // namespace mlaserve
