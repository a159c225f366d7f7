// What happens to a step's logits: prompt logprobs, sampling, finish checks (EOS, stop token
// ids, stop strings, max_new_tokens, context), detokenization, and one OutputView chunk per
// request per step through its callback (a view of the request's own buffers: delivering
// allocates nothing). Per-request state lives on the Request (its history,
// penalties, decoder, stop matcher, undelivered text and logprobs); the processor owns the
// sampler's scratch, so one processor serves one thread (the engine thread).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"
#include "engine/batch_plan.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace mlaserve {

class OutputProcessor {
 public:
  // Ends a request for a reason; the engine's Finish (it calls FlushText and Deliver back).
  using FinishFn = FunctionRef<void(Request&, FinishReason)>;

  // tokenizer (optional) must outlive the processor: it enables text output and stop strings.
  // clock (first-token and delivery times) must outlive it too.
  OutputProcessor(const ModelRunnerInfo& model, const Tokenizer* tokenizer, const Clock& clock = Clock::Real());

  // At Submit: the request's output state (detokenizer, stop matcher, prompt-logprob slots).
  // An error when the request asks for what cannot be done (stop strings without a tokenizer).
  Status Prepare(Request& r) const;

  // The step's outputs: for each planned request (in plan order, `requests` parallel to
  // plan.sequences) its prompt logprobs from the logits rows, then, once its prompt is computed,
  // one sampled token, the finish checks, and a chunk to its callback. A sequence with drafts
  // samples row i exactly as a one-token decode at that position (greedy or seeded draw keyed
  // by the position) and goes on to row i + 1 only while that token equals draft i, so the
  // last token appended is the correction or the bonus: this is speculative (rejection)
  // sampling for a one-hot draft distribution, and the tokens appended are the ones one-by-one
  // decoding appends (docs/architecture.md, "Speculative sampling"). Each appended token goes
  // through the same checks as if decoded alone, so a finish ends the run. `logits` is the
  // runner's [plan.num_logits_rows, vocab]. Requests that end are passed to `finish`. Returns
  // the number of tokens appended. `captured` is the runner's [plan.num_tokens(), captured_width]
  // (empty unless the plan captured): a request with capture_hidden_states gets, in the chunk of
  // this step, the rows of its positions that became final (the chunk's tokens, minus rejected
  // drafts), also when the step samples nothing for it.
  int Process(const BatchPlan& plan, std::span<Request* const> requests, std::span<const float> logits,
              std::span<const float> captured, FinishFn finish);

  // At the end of a request (any reason): what the detokenizer and the stop matcher still hold
  // becomes pending text, unless a stop string ended it.
  void FlushText(Request& r);
  // Sends what `r` has not delivered yet (tokens, logprobs, text) as one chunk; an unfinished
  // chunk only when there is something new. `error`: why it was aborted or rejected. The view
  // points into `r` and is valid during the callback; afterwards the delivered tokens count as
  // streamed and the pending buffers are cleared (capacity kept).
  void Deliver(Request& r, bool finished, std::string_view error = {});

  // Speculative decoding since construction (the engine's "accept len" and "accept rate").
  struct SpecCounters {
    int64_t verify_steps = 0;     // request-steps that verified at least one draft
    int64_t draft_tokens = 0;     // drafts verified
    int64_t accepted_tokens = 0;  // drafts accepted and appended
  };
  const SpecCounters& spec_counters() const { return spec_; }

 private:
  // One sampled token: history, logprobs, finish checks, text. True when it finished the request.
  bool AfterToken(Request& r, TokenId token, LogprobResult* logprob, FinishFn finish);
  void CollectInputLogprobs(Request& r, int first_position, int count, const float* logits) const;
  bool AppendText(Request& r, std::string_view piece);  // true when a stop string matched

  // Points r's pending captured rows at the first `count` positions of its planned tokens.
  void SetCaptured(Request& r, const PlannedSequence& seq, std::span<const float> captured, int count) const;

  int vocab_size_;
  int max_context_;
  int captured_width_;
  const Tokenizer* tokenizer_;
  const Clock& clock_;
  std::vector<TokenId> eos_token_ids_;  // the model's and the tokenizer's
  Sampler sampler_;
  SpecCounters spec_;
};

}  // namespace mlaserve
