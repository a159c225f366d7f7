#include "batch/output_record.h"

#include "core/check.h"

namespace mlaserve::batch {

using nlohmann::json;

void AppendSegment(std::vector<Segment>& segments, const Serving& serving, int tokens) {
  if (tokens <= 0) return;
  if (!segments.empty()) {
    Segment& last = segments.back();
    if (last.kv_cache_dtype == serving.kv_cache_dtype && last.model == serving.model &&
        last.server_id == serving.server_id) {
      last.tokens += tokens;
      return;
    }
  }
  segments.push_back({.tokens = tokens, .kv_cache_dtype = serving.kv_cache_dtype, .model = serving.model,
                      .server_id = serving.server_id});
}

std::string KvSummary(std::span<const Segment> segments) {
  std::string out, last;
  for (const Segment& s : segments) {
    if (s.kv_cache_dtype == last) continue;
    out += (out.empty() ? "" : "+") + s.kv_cache_dtype;
    last = s.kv_cache_dtype;
  }
  return out.empty() ? "unknown" : out;
}

namespace {

// An answer as its record's shape writes it: the message (its content and, split, its
// reasoning_content) or the text.
json AnswerMessage(const Answer& answer, RecordShape shape, const OutputSettings& settings) {
  json message = {{"content", answer.text}};
  if (!settings.reasoning_parser) return message;
  const chat::ReasoningSplit split = chat::ReasoningParser::Split(*settings.reasoning_parser, answer.text);
  if (settings.strip_reasoning) {
    message["content"] = split.content;
  } else if (shape == RecordShape::kChat) {
    message["content"] = split.content;
    message["reasoning_content"] = split.reasoning;
  }
  return message;
}

}  // namespace

std::string RenderOutputLine(const Record& record, std::span<const Answer> answers, const OutputSettings& settings) {
  MLA_CHECK(answers.size() == record.answer_slots.size());
  json out = record.source;
  out["id"] = record.id;
  switch (record.shape) {
    case RecordShape::kChat: {
      json& list = out["messages"];
      for (size_t k = 0; k < answers.size(); ++k) {
        const size_t slot = size_t(record.answer_slots[k]);
        if (slot >= list.size()) list.push_back({{"role", "assistant"}});
        list[slot].erase("reasoning_content");  // the input's answer had it, not the new one
        list[slot].update(AnswerMessage(answers[k], record.shape, settings));
      }
      break;
    }
    case RecordShape::kShareGpt: {
      json& list = out["conversations"];
      for (size_t k = 0; k < answers.size(); ++k) {
        const size_t slot = size_t(record.answer_slots[k]);
        const json text = AnswerMessage(answers[k], record.shape, settings)["content"];
        if (slot < list.size()) list[slot]["value"] = text;
        else list.push_back({{"from", "gpt"}, {"value", text}});
      }
      break;
    }
    case RecordShape::kPrompt:
      out["completion"] = answers.empty() ? json("") : AnswerMessage(answers[0], record.shape, settings)["content"];
      break;
  }
  json turns = json::array();
  int64_t prompt_total = 0, completion_total = 0;
  for (const Answer& a : answers) {
    json segments = json::array();
    for (const Segment& s : a.segments) {
      segments.push_back({{"tokens", s.tokens},
                          {"kv_cache_dtype", s.kv_cache_dtype},
                          {"model", s.model},
                          {"server_id", s.server_id}});
    }
    turns.push_back({{"prompt_tokens", a.prompt_tokens},
                     {"completion_tokens", a.ids.size()},
                     {"finish_reason", a.finish_reason},
                     {"segments", std::move(segments)}});
    prompt_total += a.prompt_tokens;
    completion_total += int64_t(a.ids.size());
  }
  out["turns"] = std::move(turns);
  out["usage"] = {{"prompt_tokens", prompt_total}, {"completion_tokens", completion_total}};
  out["settings"] = {{"model", settings.model},
                     {"kv_cache_dtype", settings.kv_cache_dtype},
                     {"seed", settings.seed},
                     {"temperature", settings.temperature},
                     {"top_p", settings.top_p},
                     {"max_new_tokens", settings.max_new_tokens}};
  if (settings.reasoning_parser) {
    out["settings"]["reasoning_parser"] = chat::ReasoningFormatName(*settings.reasoning_parser);
    out["settings"]["strip_reasoning"] = settings.strip_reasoning;
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace mlaserve::batch
