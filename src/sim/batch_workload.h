// A `mlaserve batch` run as a simulated workload: every record of a batch input (OpenAI
// messages, ShareGPT, plain prompt; batch/records.h) becomes a conversation whose assistant turns
// are regenerated in order, each turn a request sent when the turn before it ends
// (TimedRequest::follows), all conversations ready at time 0 (the batch tool's --concurrency is
// the run's concurrency limit).
//
// Lengths. A turn's prompt is the chat template rendered over the conversation up to that turn
// (the model's tokenizer and template, as batch renders it). A turn's answer length is, in order
// of preference: that record's turn in a batch output (--lengths-from: "turns"[k]
// "completion_tokens", and the prompt growth from its "prompt_tokens"), else the length of the
// input's own assistant message at that place (capped at max_new_tokens), else max_new_tokens
// (a conversation ending with a user turn). A later turn's prompt is the earlier turn's prompt
// and simulated answer followed by the tokens the template adds after that answer (the next
// user message and the generation prompt), counted as rendered prompt growth minus the earlier
// answer's length.
//
// Token ids are the tokenizer's, folded into the simulated vocabulary (id % vocab_size), so
// prompts that share a system prompt share a cached prefix, as in a real run.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/virtual_run.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

struct BatchWorkload {
  std::vector<TimedRequest> requests;  // conversations in input order, each one's turns in order
  int64_t records = 0;                 // conversations
  int64_t skipped_lines = 0;           // malformed lines and duplicate ids, as batch skips them
  std::string first_skipped;           // "line N: why", for the log
  int64_t turns_with_lengths = 0;      // turns whose lengths came from --lengths-from
};

struct BatchWorkloadOptions {
  std::string input_path;         // batch's input JSONL
  std::string lengths_from_path;  // a batch output JSONL; empty: lengths from the input
  int max_new_tokens = 256;       // batch's --max-new-tokens
  int vocab_size = 0;             // ids are folded below it
};

Result<BatchWorkload> ReadBatchWorkload(const BatchWorkloadOptions& options, const Tokenizer& tokenizer,
                                        const ChatTemplate& chat_template);

}  // namespace mlaserve
