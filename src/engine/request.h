// A request as the engine tracks it between Submit and its last output: one unique_ptr per live
// request, held by the engine's intake, then by the Scheduler (its queues, its KV), while the
// OutputProcessor keeps its output state here (history, detokenizer, stop matcher, undelivered
// logprobs and text: the buffers each delivered OutputView points into, reused chunk after chunk).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/clock.h"
#include "engine/engine_types.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "tokenizer/stream_decoder.h"
#include "kvcache/radix_cache.h"
#include "kvcache/sequence_kv.h"

namespace mlaserve {

struct Request {
  GenerateRequest spec;
  OutputCallback callback;
  uint64_t seed = 0;                    // spec.sampling.seed, or one the engine drew

  std::vector<TokenId> tokens;          // prompt followed by every sampled token
  int num_output_tokens() const { return int(tokens.size() - spec.input_ids.size()); }
  int num_streamed = 0;                 // output tokens already delivered
  std::vector<float> pending_logprobs;  // logprobs of undelivered tokens
  std::vector<std::vector<TokenLogprob>> pending_top_logprobs;
  PenaltyState penalties;               // output token counts, for the penalties
  std::vector<float> input_logprobs;    // prompt logprobs computed so far (logprob_start_len)
  std::vector<std::vector<TokenLogprob>> input_top_logprobs;
  bool input_logprobs_sent = false;
  // With spec.capture_hidden_states: the step's captured rows not yet delivered, a view into the
  // runner's output (valid during the step that set it), from this position on.
  std::span<const float> pending_captured;
  int pending_captured_position = 0;
  bool wants_input_logprobs() const { return spec.logprob_start_len >= 0 && !input_logprobs_sent; }

  // Detokenization (when the engine has a tokenizer): text streams as it becomes safe to show.
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> stop_matcher;
  std::string pending_text;             // text not yet delivered
  std::string matched_stop_string;

  std::unique_ptr<SequenceKv> kv;       // KV for tokens[0, kv->num_tokens())
  // [<= num_draft_tokens, capacity reserved at Submit] drafts this step verifies; while not
  // empty, kv may also hold rows of drafts the step rejects (Scheduler::DropRejectedDrafts).
  std::vector<TokenId> draft_tokens;
  // A drafter's guesses for the next step, made after the last one (the MTP drafter's Observe),
  // which its Propose hands out; capacity reserved at Submit.
  std::vector<TokenId> next_drafts;
  // Adaptive drafting (EngineOptions::adaptive_drafts; Scheduler::AdaptDraftLimit): drafts
  // allowed per step, decode steps left without drafts, the next pause's length, and verify
  // steps in a row that accepted no draft.
  int draft_limit = 0;
  int draft_pause = 0;
  int draft_backoff = 0;
  int draft_misses = 0;
  std::optional<RadixCache::NodeHandle> locked_prefix;  // held while borrowing cached pages
  int cached_tokens = 0;                // prompt tokens the prefix cache served (first admission)
  bool admitted_once = false;

  FinishReason finish_reason = FinishReason::kNone;
  TokenId matched_stop_token = -1;

  Clock::time_point submit_time;
  std::optional<Clock::time_point> first_scheduled_time;
  std::optional<Clock::time_point> first_token_time;

  // Tokens still to run through the model before the next token can be sampled.
  int pending_tokens() const { return int(tokens.size()) - kv->num_tokens(); }
  bool decoding() const { return pending_tokens() == 1 && num_output_tokens() > 0; }
};

}  // namespace mlaserve
