#include "batch/records.h"

#include <cstdio>
#include <cstring>

namespace mlaserve::batch {
namespace {

using nlohmann::json;

// OpenAI content: a string, or a list of parts of which the "text" ones are joined.
Result<std::string> ContentText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Status::Error("content must be a string or a list of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Status::Error("only text content parts are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

Result<std::string> ShareGptRole(const std::string& from) {
  if (from == "human" || from == "user") return std::string("user");
  if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "model") return std::string("assistant");
  if (from == "system") return std::string("system");
  return Status::Error("unknown ShareGPT speaker '" + from + "' (want human, gpt or system)");
}

// Fills messages from the record's own field; the caller computes the answer slots.
Status ReadMessages(const json& j, Record& r) {
  if (j.contains("messages")) {
    r.shape = RecordShape::kChat;
    const json& list = j["messages"];
    if (!list.is_array()) return Status::Error("'messages' must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& m = list[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return Status::Error(where + " needs a string 'role'");
      }
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant") {
        return Status::Error(where + ": role '" + role + "' is not system, user or assistant");
      }
      auto text = ContentText(m.contains("content") && !m["content"].is_null() ? m["content"] : json(""));
      if (!text.ok()) return Status::Error(where + ": " + text.error());
      r.messages.push_back({role, *text});
    }
    return Status::Ok();
  }
  if (j.contains("conversations")) {
    r.shape = RecordShape::kShareGpt;
    const json& list = j["conversations"];
    if (!list.is_array()) return Status::Error("'conversations' must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& m = list[i];
      const std::string where = "conversations[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("from") || !m["from"].is_string() || !m.contains("value") ||
          !m["value"].is_string()) {
        return Status::Error(where + " needs string 'from' and 'value'");
      }
      auto role = ShareGptRole(m["from"].get<std::string>());
      if (!role.ok()) return Status::Error(where + ": " + role.error());
      r.messages.push_back({*role, m["value"].get<std::string>()});
    }
    return Status::Ok();
  }
  if (j.contains("prompt")) {
    r.shape = RecordShape::kPrompt;
    if (!j["prompt"].is_string()) return Status::Error("'prompt' must be a string");
    r.messages.push_back({"user", j["prompt"].get<std::string>()});
    return Status::Ok();
  }
  return Status::Error("want 'messages' (OpenAI chat), 'conversations' (ShareGPT) or 'prompt'");
}

// An answer goes at each assistant message, and after a final user message. Each must follow a
// user message, so that there is something to answer.
Status ComputeSlots(Record& r) {
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].role != "assistant") continue;
    if (i == 0 || r.messages[i - 1].role != "user") {
      return Status::Error("assistant turn " + std::to_string(i) + " does not follow a user turn");
    }
    r.answer_slots.push_back(int(i));
  }
  if (!r.messages.empty() && r.messages.back().role == "user") r.answer_slots.push_back(int(r.messages.size()));
  if (r.answer_slots.empty()) return Status::Error("nothing to answer: no user turn");
  return Status::Ok();
}

}  // namespace

uint64_t Fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t Hash64(std::string_view bytes, uint64_t seed) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  auto mix = [](uint64_t lane, uint64_t word) {
    lane ^= word;
    lane = (lane << 31) | (lane >> 33);
    return lane * 0xff51afd7ed558ccdULL;
  };
  uint64_t lanes[4] = {seed, seed ^ kMul, seed + kMul, seed - kMul};
  const char* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 32; p += 32, n -= 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t word;
      std::memcpy(&word, p + 8 * k, 8);
      lanes[k] = mix(lanes[k], word);
    }
  }
  uint64_t h = lanes[0] ^ (lanes[1] * 3) ^ (lanes[2] * 5) ^ (lanes[3] * 7);
  h = Fnv1a64(std::string_view(p, n), h ^ n);  // the last < 32 bytes
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 29);
}

std::string Hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)value);
  return buf;
}

std::string AutoId(const json& record_without_id) {
  return "auto-" + Hex64(Fnv1a64(record_without_id.dump(-1, ' ', false, json::error_handler_t::replace)));
}

Result<Record> ParseRecordLine(std::string_view line, int line_no) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error("not valid JSON");
  if (!j.is_object()) return Status::Error("not a JSON object");
  Record r;
  r.line_no = line_no;
  if (j.contains("id") && !j["id"].is_null()) {
    if (j["id"].is_string()) r.id = j["id"].get<std::string>();
    else if (j["id"].is_number_unsigned()) r.id = std::to_string(j["id"].get<uint64_t>());
    else if (j["id"].is_number_integer()) r.id = std::to_string(j["id"].get<int64_t>());
    else return Status::Error("'id' must be a string or an integer");
    if (r.id.empty()) return Status::Error("'id' is empty");
  } else {
    json content = j;
    content.erase("id");
    r.id = AutoId(content);
  }
  MLA_RETURN_IF_ERROR(ReadMessages(j, r));
  MLA_RETURN_IF_ERROR(ComputeSlots(r));
  r.source = std::move(j);
  return r;
}

std::optional<InputProblem> DuplicateIds::Check(const std::string& id, int line_no) {
  const auto [it, inserted] = first_line_.emplace(id, line_no);
  if (inserted) return std::nullopt;
  return InputProblem{line_no, id, "duplicate id '" + id + "' (first at line " + std::to_string(it->second) +
                                       "; the first wins)"};
}

}  // namespace mlaserve::batch
