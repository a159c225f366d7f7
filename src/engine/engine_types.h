// What clients hand the engine and what it hands back. A request is a value the engine copies in
// at Submit; its outputs come back as OutputView chunks (borrowed, valid during the callback
// only), which a consumer copies into a RequestOutput it owns when it keeps them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "engine/logprobs.h"
#include "engine/sampling_params.h"

namespace mlaserve {

class Drafter;

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort"

struct GenerateRequest {
  std::string rid;                  // unique among live requests
  std::vector<TokenId> input_ids;   // the prompt, already tokenized
  SamplingParams sampling;
  // >= 0: also the logprob of every prompt token from this position on (SGLang's
  // logprob_start_len); the prefix cache is then not used for this request.
  int logprob_start_len = -1;
  // The captured hidden states of every position this request runs (ModelRunnerInfo::
  // captured_width > 0; needs the radix cache off: a cached prefix is never run). Delivered in
  // OutputView::captured_rows.
  bool capture_hidden_states = false;
};

// One chunk of a request's progress, delivered in order. The last chunk has finished == true;
// exactly one such chunk is delivered per submitted request (also on abort or rejection).
//
// Ownership: the spans and string_views point into the request's state on the engine thread
// (its token history, its undelivered logprobs and text), which the engine reuses for the next
// chunk. They are valid only until the callback returns; a consumer that keeps anything copies
// it (RequestOutput::Assign reuses the target's capacity, so a consumer that recycles its
// RequestOutputs copies without allocating once they have grown). The engine never allocates
// to deliver a chunk: the views cost nothing and its buffers keep their capacity.
struct OutputView {
  std::string_view rid;
  std::span<const TokenId> new_token_ids;   // tokens sampled since the previous chunk
  std::span<const float> new_token_logprobs;  // with sampling.return_logprob
  // With return_logprob and top_logprobs_num > 0: per new token, the most likely tokens.
  std::span<const std::vector<TokenLogprob>> new_top_logprobs;
  // With logprob_start_len >= 0, once (in the chunk that carries the first token): the prompt
  // tokens from that position and each one's logprob given the ones before it (NaN for the
  // first token of the prompt, which has no context), and the top-N alternatives.
  std::span<const TokenId> input_token_ids;
  std::span<const float> input_token_logprobs;
  std::span<const std::vector<TokenLogprob>> input_top_logprobs;
  // With capture_hidden_states: [rows, captured_width] the captured rows of the positions whose
  // KV rows became final this step, in order from captured_first_position: every position of a
  // prefill chunk (a chunk that samples nothing is delivered with no new tokens), the decode
  // token's, and under speculation only the accepted ones. The last token of the sequence is
  // never run, so it has no row. A retracted request re-prefills and delivers positions again
  // (the same values under deterministic inference): consumers key rows by position.
  std::span<const float> captured_rows;
  int captured_first_position = 0;
  int captured_width = 0;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string_view new_text;         // detokenized text since the previous chunk (with a tokenizer)
  TokenId matched_stop_token = -1;   // the stop token id that ended it, if any
  std::string_view matched_stop_string;  // the stop string that ended it, if any
  std::string_view error;            // rejected or aborted: why
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;             // prompt tokens served from the prefix cache
  double queue_time_s = 0;           // submit -> first scheduled
  double ttft_s = 0;                 // submit -> first token (set once a token exists)
  double e2e_latency_s = 0;          // submit -> finish (on the last chunk)
};

// An OutputView copied into storage its holder owns (the fields mean the same).
struct RequestOutput {
  std::string rid;
  std::vector<TokenId> new_token_ids;
  std::vector<float> new_token_logprobs;
  std::vector<std::vector<TokenLogprob>> new_top_logprobs;
  std::vector<TokenId> input_token_ids;
  std::vector<float> input_token_logprobs;
  std::vector<std::vector<TokenLogprob>> input_top_logprobs;
  std::vector<float> captured_rows;
  int captured_first_position = 0;
  int captured_width = 0;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string new_text;
  TokenId matched_stop_token = -1;
  std::string matched_stop_string;
  std::string error;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  double queue_time_s = 0;
  double ttft_s = 0;
  double e2e_latency_s = 0;

  // Replaces every field with the view's. Assigns into the existing strings and vectors, so it
  // allocates only where one must grow past what it held before (top-logprob lists aside: their
  // inner vectors are copied per token).
  void Assign(const OutputView& v);
};

// Called on the engine thread with a view valid only during the call (see OutputView): must be
// quick, must not call back into the engine, and copies what it keeps.
using OutputCallback = std::function<void(const OutputView&)>;

enum class SchedulePolicy { kFcfs, kLpm };

struct EngineOptions {
  int max_running_requests = 256;
  int chunked_prefill_size = 2048;     // tokens of prefill per step; <= 0: unlimited (one chunk)
  int max_prefill_tokens = 16384;      // prompt tokens admitted per step
  SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
  double schedule_conservativeness = 1.0;
  bool disable_radix_cache = false;
  int decode_log_interval = 40;        // decode steps between "Decode batch" log lines
  bool log_batches = true;
  // Speculative decoding (docs/architecture.md): with a drafter (borrowed; must outlive the
  // engine) and num_draft_tokens > 0, each step verifies up to num_draft_tokens drafted tokens
  // per decoding request (greedy or sampled). Null or 0: off.
  Drafter* drafter = nullptr;
  int num_draft_tokens = 0;
  // Adaptive drafting (docs/architecture.md, "Adaptive drafting"): each request drafts up to
  // what its recent verify steps accepted, and pauses drafting after repeated misses.
  bool adaptive_drafts = false;
  // Speculative step tuning (engine/draft_step_tuner.h): the engine-wide most drafts per verify
  // step (0..num_draft_tokens; 0: plain decoding) chosen by measured decode throughput, re-measured every
  // tune_hold_steps decode-only steps with windows of tune_window_steps per setting.
  bool tune_draft_steps = false;
  int tune_window_steps = 32;
  int tune_hold_steps = 256;
  std::string speculative_algorithm;  // "", "NGRAM", "NEXTN" or "EAGLE3": what the drafter is (logs, server info)
  std::string draft_model_path;       // EAGLE3: the draft checkpoint (server info)
  bool speculative() const { return drafter != nullptr && num_draft_tokens > 0; }
};

// Counters for logs and the metrics endpoint: written by the engine thread, read by anyone.
// Names follow SGLang's Prometheus metrics (docs/server.md).
struct EngineStatsSnapshot {
  int64_t num_running_reqs = 0;
  int64_t num_queue_reqs = 0;
  int64_t num_used_tokens = 0;
  double token_usage = 0;             // used / capacity
  double gen_throughput = 0;          // tokens/s over the last decode log interval
  double cache_hit_rate = 0;          // cached / total prompt tokens admitted
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t cached_tokens_total = 0;
  int64_t num_requests_total = 0;          // finished for any reason, aborts included
  int64_t num_aborted_requests_total = 0;  // finished with finish_reason abort
  int64_t num_retracted_reqs = 0;          // retracted during the last decode log interval
  int64_t num_retracted_requests_total = 0;
  int64_t max_running_reqs_seen = 0;  // peak concurrency
  int64_t max_total_num_tokens = 0;
  // Speculative decoding (SGLang's "accept len" and "accept rate"): per verify step of one
  // request, the tokens it appended (accepted drafts + 1), and accepted / proposed drafts.
  double spec_accept_length = 0;         // over the last decode log interval
  double spec_accept_rate = 0;           // over the last decode log interval
  int64_t spec_verify_steps_total = 0;   // request-steps that verified at least one draft
  int64_t spec_draft_tokens_total = 0;   // drafts proposed and run through the model
  int64_t spec_accepted_tokens_total = 0;  // drafts accepted (and kept: not past a finish)
  int64_t spec_draft_errors_total = 0;     // steps whose drafter failed (no drafts; logged once)
  int spec_draft_cap = -1;                 // speculative step tuning: the drafts allowed now (-1: not tuning)
  int64_t spec_tuning_rounds_total = 0;    // its measurement rounds completed
};

// What a cache flush did (SGLang's /flush_cache). Like SGLang, the engine flushes only when no
// request is running or queued: a running request may borrow cached pages and a queued one is
// about to match them, so a flush then changes nothing and says why.
struct FlushCacheResult {
  bool flushed = false;
  int64_t freed_tokens = 0;      // cached tokens whose pages went back to the pool
  int64_t num_running_reqs = 0;  // when the engine thread took the flush
  int64_t num_queue_reqs = 0;
  int64_t cached_tokens = 0;     // what the prefix cache holds afterwards...
  int64_t locked_tokens = 0;     // ...of which running requests borrow
};

}  // namespace mlaserve
