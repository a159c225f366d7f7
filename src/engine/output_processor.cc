#include "engine/output_processor.h"

#include <algorithm>
#include <limits>

namespace mlaserve {

OutputProcessor::OutputProcessor(const ModelRunnerInfo& model, const Tokenizer* tokenizer, const Clock& clock)
    : vocab_size_(model.vocab_size),
      max_context_(model.max_context),
      captured_width_(model.captured_width),
      tokenizer_(tokenizer),
      clock_(clock),
      sampler_(model.vocab_size) {
  if (model.eos_token_id >= 0) eos_token_ids_.push_back(model.eos_token_id);
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(eos_token_ids_.begin(), eos_token_ids_.end(), *tokenizer_->eos_id()) == eos_token_ids_.end()) {
    eos_token_ids_.push_back(*tokenizer_->eos_id());
  }
}

Status OutputProcessor::Prepare(Request& r) const {
  if (r.spec.logprob_start_len == 0) {
    r.input_logprobs.push_back(std::numeric_limits<float>::quiet_NaN());  // no context
    r.input_top_logprobs.emplace_back();
  }
  if (tokenizer_) {
    r.decoder.emplace(*tokenizer_, r.spec.sampling.skip_special_tokens);
    if (!r.spec.sampling.stop.empty()) {
      r.stop_matcher.emplace(r.spec.sampling.stop, r.spec.sampling.no_stop_trim);
    }
  } else if (!r.spec.sampling.stop.empty()) {
    return Status::Error("stop strings need a tokenizer");
  }
  return Status::Ok();
}

int OutputProcessor::Process(const BatchPlan& plan, std::span<Request* const> requests,
                             std::span<const float> logits, std::span<const float> captured,
                             FinishFn finish) {
  const size_t vocab = size_t(vocab_size_);
  int appended = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& r = *requests[i];
    const PlannedSequence& seq = plan.sequences[i];
    const std::span<const TokenId> drafts = seq.drafts(plan.tokens);
    const float* rows = logits.data() + size_t(seq.first_logits_row) * vocab;
    // Positions before the drafts are final whatever is accepted; an accepted draft's as it is.
    const int settled = seq.num_new_tokens - int(drafts.size());
    if (r.spec.capture_hidden_states) SetCaptured(r, seq, captured, settled);
    if (drafts.empty()) {
      if (seq.all_logits) CollectInputLogprobs(r, seq.num_computed_tokens, seq.num_new_tokens, rows);
      if (r.pending_tokens() != 0) {  // a prefill chunk that is not the prompt's last
        if (r.spec.capture_hidden_states) Deliver(r, /*finished=*/false);
        continue;
      }
      if (r.spec.sampling.max_new_tokens == 0) {
        finish(r, FinishReason::kLength);  // prefill only (e.g. to warm the prefix cache)
        continue;
      }
    }
    // Rows [first, num_logits_rows): the last token's, then one per draft. Verification is
    // speculative sampling with a one-hot draft distribution q = [d_j]: row j's token x is drawn
    // from the target p_j exactly as a one-token decode would draw it (the same transforms, the
    // uniform keyed by (seed, position)); d_j is accepted when x == d_j, which happens with
    // probability p_j(d_j) = min(1, p_j/q_j)(d_j), and otherwise x, distributed as p_j without d_j
    // renormalised = norm((p_j - q_j)+), is the correction. One uniform serves both the test and
    // the residual draw, so the output is the token-for-token output of one-by-one decoding
    // whatever was drafted (docs/architecture.md, "Speculative sampling").
    const float* first = rows + size_t(seq.num_logits_rows() - 1 - int(drafts.size())) * vocab;
    bool finished = false;
    int accepted = 0;
    for (size_t j = 0; j <= drafts.size(); ++j) {
      const SampleContext context{.position = int64_t(r.tokens.size()),
                                  .seed = r.seed,
                                  .output_history = &r.penalties,
                                  .eos_token_ids = eos_token_ids_};
      LogprobResult logprob;
      LogprobResult* wanted = r.spec.sampling.return_logprob ? &logprob : nullptr;
      const TokenId token = sampler_.Sample(std::span(first + j * vocab, vocab), r.spec.sampling, context, wanted);
      ++appended;
      // Row j was run for the token before this one, which drafts[0, j) being accepted made final.
      if (r.spec.capture_hidden_states) SetCaptured(r, seq, captured, settled + int(j));
      finished = AfterToken(r, token, wanted, finish);
      const bool accept = j < drafts.size() && token == drafts[j];
      accepted += accept ? 1 : 0;
      if (finished || !accept) break;
    }
    if (!drafts.empty()) {
      ++spec_.verify_steps;
      spec_.draft_tokens += int64_t(drafts.size());
      spec_.accepted_tokens += accepted;
    }
    if (!finished) Deliver(r, /*finished=*/false);
  }
  return appended;
}

void OutputProcessor::SetCaptured(Request& r, const PlannedSequence& seq, std::span<const float> captured,
                                  int count) const {
  const size_t width = size_t(captured_width_);
  r.pending_captured = captured.subspan(size_t(seq.first_token) * width, size_t(count) * width);
  r.pending_captured_position = seq.num_computed_tokens;
}

void OutputProcessor::CollectInputLogprobs(Request& r, int first_position, int count, const float* logits) const {
  const int prompt_len = int(r.spec.input_ids.size());
  for (int j = 0; j < count; ++j) {
    // The row at position p predicts the token at p + 1.
    const int next = first_position + j + 1;
    if (next >= prompt_len || next < std::max(1, r.spec.logprob_start_len)) continue;
    // Entry k is the token at logprob_start_len + k; a recomputation after retraction must not
    // append what is already there.
    if (size_t(next - r.spec.logprob_start_len) != r.input_logprobs.size()) continue;
    LogprobResult lp;
    ComputeLogprobs(std::span(logits + size_t(j) * size_t(vocab_size_), size_t(vocab_size_)), 1.0f,
                    r.spec.input_ids[size_t(next)], r.spec.sampling.top_logprobs_num, lp);
    r.input_logprobs.push_back(lp.chosen.logprob);
    r.input_top_logprobs.push_back(std::move(lp.top));
  }
}

bool OutputProcessor::AfterToken(Request& r, TokenId token, LogprobResult* logprob, FinishFn finish) {
  const SamplingParams& p = r.spec.sampling;
  r.tokens.push_back(token);
  r.penalties.Add(token);
  if (!r.first_token_time) r.first_token_time = clock_.Now();
  if (logprob != nullptr) {
    r.pending_logprobs.push_back(logprob->chosen.logprob);
    if (p.top_logprobs_num > 0) r.pending_top_logprobs.push_back(std::move(logprob->top));
  }
  const int out = r.num_output_tokens();
  FinishReason reason = FinishReason::kNone;
  if (out >= p.min_new_tokens && IsStopToken(p, eos_token_ids_, token)) {
    r.matched_stop_token = token;
    reason = FinishReason::kStop;
  } else if (r.decoder && AppendText(r, r.decoder->Push(token))) {
    reason = FinishReason::kStop;
  } else if (out >= p.max_new_tokens || int(r.tokens.size()) >= max_context_) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) return false;
  finish(r, reason);
  return true;
}

bool OutputProcessor::AppendText(Request& r, std::string_view piece) {
  if (!r.stop_matcher) {
    r.pending_text.append(piece);
    return false;
  }
  r.pending_text.append(r.stop_matcher->Push(piece));
  if (!r.stop_matcher->stopped()) return false;
  r.matched_stop_string = r.spec.sampling.stop[size_t(r.stop_matcher->matched_index())];
  return true;
}

void OutputProcessor::FlushText(Request& r) {
  if (r.decoder && r.matched_stop_string.empty()) {
    if (!AppendText(r, r.decoder->Flush()) && r.stop_matcher) r.pending_text.append(r.stop_matcher->Finish());
  }
}

void OutputProcessor::Deliver(Request& r, bool finished, std::string_view error) {
  const size_t prompt_len = r.spec.input_ids.size();
  const std::span<const TokenId> history(r.tokens);
  OutputView out;
  out.rid = r.spec.rid;
  out.new_token_ids = history.subspan(prompt_len + size_t(r.num_streamed));
  out.new_token_logprobs = r.pending_logprobs;
  out.new_top_logprobs = r.pending_top_logprobs;
  const size_t expected_input = r.spec.logprob_start_len >= 0 ? prompt_len - size_t(r.spec.logprob_start_len) : 0;
  const bool send_input = !r.input_logprobs_sent && expected_input > 0 &&
                          (r.input_logprobs.size() == expected_input || finished);
  if (send_input) {
    out.input_token_ids = std::span<const TokenId>(r.spec.input_ids).subspan(size_t(r.spec.logprob_start_len));
    out.input_token_logprobs = r.input_logprobs;
    out.input_top_logprobs = r.input_top_logprobs;
  }
  out.captured_rows = r.pending_captured;
  out.captured_first_position = r.pending_captured_position;
  out.captured_width = captured_width_;
  out.finished = finished;
  out.finish_reason = r.finish_reason;
  out.matched_stop_token = r.matched_stop_token;
  out.matched_stop_string = r.matched_stop_string;
  out.new_text = r.pending_text;
  out.error = error;
  out.prompt_tokens = int(prompt_len);
  out.completion_tokens = r.num_output_tokens();
  out.cached_tokens = r.cached_tokens;
  const Clock::time_point now = clock_.Now();
  if (r.first_scheduled_time) out.queue_time_s = ElapsedSeconds(r.submit_time, *r.first_scheduled_time);
  if (r.first_token_time) out.ttft_s = ElapsedSeconds(r.submit_time, *r.first_token_time);
  out.e2e_latency_s = ElapsedSeconds(r.submit_time, now);
  if (!finished && out.new_token_ids.empty() && out.new_text.empty() && out.captured_rows.empty()) return;
  if (r.callback) r.callback(out);
  r.pending_captured = {};  // a view into the runner's buffer: valid for this step only
  // Delivered: the buffers empty but keep their capacity for the next chunk. The prompt
  // logprobs go once, so theirs is let go.
  r.num_streamed = r.num_output_tokens();
  r.pending_logprobs.clear();
  r.pending_top_logprobs.clear();
  r.pending_text.clear();
  if (send_input) {
    r.input_logprobs_sent = true;
    r.input_logprobs.clear();
    r.input_logprobs.shrink_to_fit();
    r.input_top_logprobs.clear();
    r.input_top_logprobs.shrink_to_fit();
  }
}

}  // namespace mlaserve
