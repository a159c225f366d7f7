#include "server/native_answer.h"

#include <nlohmann/json.hpp>

#include "server/api_json.h"

namespace mlaserve {

void NativeAnswer::AppendItem(std::string& list, size_t& count, std::string_view item) {
  if (count++ > 0) list.push_back(',');
  list.append(item);
}

void NativeAnswer::AppendToken(TokenId id) { AppendItem(output_ids_, num_output_ids_, std::to_string(id)); }

void NativeAnswer::ForgetSentOutput() {
  text_.clear();
  output_ids_.clear();
  logprobs_.clear();
  top_logprobs_.clear();
  num_output_ids_ = num_logprobs_ = num_top_logprobs_ = 0;
}

void NativeAnswer::Serialize(const RequestOutput& o, std::string_view finish_reason_json, bool with_logprobs,
                             std::optional<size_t> index, std::string& out) const {
  auto key = [&](std::string_view name) {
    out.push_back('"');
    out.append(name);
    out.append("\":");
  };
  auto list = [&](const std::string& items) {
    out.push_back('[');
    out.append(items);
    out.push_back(']');
  };
  out.push_back('{');
  if (index) {
    key("index");
    out.append(std::to_string(*index));
    out.push_back(',');
  }
  key("meta_info");
  out.push_back('{');
  key("cached_tokens");
  out.append(std::to_string(o.cached_tokens));
  out.push_back(',');
  key("completion_tokens");
  out.append(std::to_string(o.completion_tokens));
  out.push_back(',');
  key("e2e_latency");
  out.append(api::Dump(nlohmann::json(o.e2e_latency_s)));
  out.push_back(',');
  key("finish_reason");
  out.append(finish_reason_json);
  out.push_back(',');
  key("id");
  out.append(api::Dump(nlohmann::json(rid_)));
  out.push_back(',');
  if (with_logprobs) {
    if (input_logprobs_) {
      key("input_token_logprobs");
      out.append(*input_logprobs_);
      out.push_back(',');
    }
    if (input_top_logprobs_) {
      key("input_top_logprobs");
      out.append(*input_top_logprobs_);
      out.push_back(',');
    }
    key("output_token_logprobs");
    list(logprobs_);
    out.push_back(',');
    if (has_top_logprobs_) {
      key("output_top_logprobs");
      list(top_logprobs_);
      out.push_back(',');
    }
  }
  key("prompt_tokens");
  out.append(std::to_string(o.prompt_tokens));
  out.append("},");
  key("output_ids");
  list(output_ids_);
  out.push_back(',');
  key("text");
  out.append(api::Dump(nlohmann::json(text_)));
  out.push_back('}');
}

}  // namespace mlaserve
