// One /generate generation's answer as it accumulates, kept as serialized JSON pieces. SGLang's
// /generate stream repeats the whole answer so far in every event; rebuilding and re-dumping a
// JSON tree of every token's id and logprobs each time is quadratic in work and allocations.
// Here each output token's entries are serialized once, when they arrive, and an event is a copy
// of those bytes plus the text (escaped per event, since the text may end mid-character).
// Serialize() writes exactly the bytes nlohmann's dump of the same object writes (keys sorted,
// as nlohmann::json's std::map orders them), so answers are unchanged.
// With --incremental-streaming-output a stream sends disjoint segments instead (SGLang's
// tokenizer_manager: the new text, output_ids and output logprob entries of each chunk);
// ForgetSentOutput() after each event makes the next Serialize() write only what came since.
// Not thread-safe: one handler thread owns it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"
#include "engine/engine_types.h"

namespace mlaserve {

class NativeAnswer {
 public:
  NativeAnswer(std::string rid, int max_new_tokens) : rid_(std::move(rid)), max_new_tokens_(max_new_tokens) {}

  const std::string& rid() const { return rid_; }
  int max_new_tokens() const { return max_new_tokens_; }

  void AppendText(std::string_view text) { text_.append(text); }
  void AppendToken(TokenId id);
  // An output token's logprob entry and its top-N list, each one serialized JSON value.
  void AppendLogprob(std::string_view entry_json) { AppendItem(logprobs_, num_logprobs_, entry_json); }
  void AppendTopLogprobs(std::string_view list_json) {
    has_top_logprobs_ = true;
    AppendItem(top_logprobs_, num_top_logprobs_, list_json);
  }
  // The prompt's logprobs (and top-N lists, when asked), serialized JSON arrays; once.
  void SetInputLogprobs(std::string logprobs_json, std::optional<std::string> top_json) {
    input_logprobs_ = std::move(logprobs_json);
    input_top_logprobs_ = std::move(top_json);
  }

  // Appends the answer so far to `out`: o is its latest output (counts, latency, finish), and
  // finish_reason_json its serialized finish_reason. with_logprobs: the request asked for them.
  // index: the generation's index, for the events of a list answer.
  void Serialize(const RequestOutput& o, std::string_view finish_reason_json, bool with_logprobs,
                 std::optional<size_t> index, std::string& out) const;

  // Drops the text, output ids and output logprob entries serialized so far (keeping the
  // buffers' capacity); the prompt's logprobs stay, as SGLang repeats them in every chunk. The
  // counts and finish_reason come from each RequestOutput and stay whole.
  void ForgetSentOutput();

 private:
  static void AppendItem(std::string& list, size_t& count, std::string_view item);

  std::string rid_;
  int max_new_tokens_;
  std::string text_;
  std::string output_ids_, logprobs_, top_logprobs_;  // comma-separated items, no brackets
  size_t num_output_ids_ = 0, num_logprobs_ = 0, num_top_logprobs_ = 0;
  // output_top_logprobs is written once any top-N list came, even when none is held since the
  // last ForgetSentOutput(), as SGLang sends the key with an empty slice.
  bool has_top_logprobs_ = false;
  std::optional<std::string> input_logprobs_, input_top_logprobs_;
};

}  // namespace mlaserve
