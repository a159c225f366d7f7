// Batch input: one JSONL line -> one Record, with a stable id and the assistant turns to generate.
// Three shapes are understood (the output keeps the input's shape):
//   OpenAI chat  {"id", "messages": [{"role": "system"|"user"|"assistant", "content"}...]}
//   ShareGPT     {"id", "conversations": [{"from": "system"|"human"|"gpt", "value"}...]}
//   plain        {"id", "prompt": TEXT}   (sent as one user message through the chat template)
// Every assistant turn of a conversation is regenerated, in order, with the model's own earlier
// answers fed forward; a conversation that ends with a user turn gets one more answer.
// A record without "id" gets AutoId(content): the same content always gets the same id.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace mlaserve::batch {

enum class RecordShape { kChat, kShareGpt, kPrompt };

struct Record {
  std::string id;
  int line_no = 0;                    // 1-based line in the input file
  RecordShape shape = RecordShape::kChat;
  nlohmann::json source;              // the input object as parsed (other fields are kept)
  std::vector<ChatMessage> messages;  // system / user / assistant, in order
  // Where each answer goes: the index in `messages` of each assistant message, then
  // messages.size() when the conversation ends with a user turn. One entry per answer.
  std::vector<int> answer_slots;
};

// A line that is not a usable record, or a duplicate id.
struct InputProblem {
  int line_no = 0;
  std::string id;      // empty when the line had none we could read
  std::string reason;  // one line
};

// Finds later duplicates of an id in memory (--dry-run); a run's first pass uses the
// progress DB's unique index instead.
class DuplicateIds {
 public:
  // A problem when `id` was seen before (the first wins), else remembers it.
  std::optional<InputProblem> Check(const std::string& id, int line_no);

 private:
  std::unordered_map<std::string, int> first_line_;
};

// "auto-" + 16 hex digits of a 64-bit FNV-1a hash of the record's canonical JSON (keys sorted,
// no whitespace, the "id" field absent). Documented in docs/batch.md.
std::string AutoId(const nlohmann::json& record_without_id);

// Parses one non-blank line. Errors name what is wrong (not the line number: the caller adds it).
Result<Record> ParseRecordLine(std::string_view line, int line_no);


// 64-bit FNV-1a, for ids (not for security).
uint64_t Fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);
// A 64-bit hash of bulk bytes, faster than FNV (four independent multiply chains over 8-byte
// words): the input file's content hash, and the hashes of input and output lines in the
// progress DB. Chainable: Hash64(b, Hash64(a)) hashes a then b, provided a's size is a
// multiple of 32 (the streamed reader's 1 MiB blocks are). Not for security.
uint64_t Hash64(std::string_view bytes, uint64_t seed = 0);
std::string Hex64(uint64_t value);

}  // namespace mlaserve::batch
