#include "engine/engine_types.h"

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

void RequestOutput::Assign(const OutputView& v) {
  rid.assign(v.rid);
  new_token_ids.assign(v.new_token_ids.begin(), v.new_token_ids.end());
  new_token_logprobs.assign(v.new_token_logprobs.begin(), v.new_token_logprobs.end());
  new_top_logprobs.assign(v.new_top_logprobs.begin(), v.new_top_logprobs.end());
  input_token_ids.assign(v.input_token_ids.begin(), v.input_token_ids.end());
  input_token_logprobs.assign(v.input_token_logprobs.begin(), v.input_token_logprobs.end());
  input_top_logprobs.assign(v.input_top_logprobs.begin(), v.input_top_logprobs.end());
  captured_rows.assign(v.captured_rows.begin(), v.captured_rows.end());
  captured_first_position = v.captured_first_position;
  captured_width = v.captured_width;
  finished = v.finished;
  finish_reason = v.finish_reason;
  new_text.assign(v.new_text);
  matched_stop_token = v.matched_stop_token;
  matched_stop_string.assign(v.matched_stop_string);
  error.assign(v.error);
  prompt_tokens = v.prompt_tokens;
  completion_tokens = v.completion_tokens;
  cached_tokens = v.cached_tokens;
  queue_time_s = v.queue_time_s;
  ttft_s = v.ttft_s;
  e2e_latency_s = v.e2e_latency_s;
}

}  // namespace mlaserve
