// One finished record -> its output line: the input object with every assistant turn replaced by
// the model's answer (a conversation ending with a user turn gains one), in the input's shape,
// plus per-turn token counts and finish reasons and the settings used. The line depends only on
// the record, the answers' token ids and the settings, never on timing or on where a stream was
// cut, so an interrupted-and-resumed run writes the same bytes as an uninterrupted one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "batch/records.h"
#include "core/types.h"

namespace mlaserve::batch {

struct Answer {
  std::vector<TokenId> ids;   // the generated tokens (no prompt)
  std::string text;           // the tokenizer's decoding of ids
  std::string finish_reason;  // "stop" or "length"
  int prompt_tokens = 0;      // the turn's prompt, as this client encoded it
};

struct OutputSettings {
  std::string model;           // --model, else the server's served model name / model path
  std::string kv_cache_dtype;  // as the server(s) reported; "a+b" when a record saw two formats
  uint64_t seed = 0;
  double temperature = 0;
  double top_p = 1;
  int max_new_tokens = 0;
};

// answers.size() == record.answer_slots.size(). No trailing newline.
std::string RenderOutputLine(const Record& record, std::span<const Answer> answers, const OutputSettings& settings);

}  // namespace mlaserve::batch
