// OpenAI's POST /v1/completions: a prompt (text, token ids, or a list of either: independent
// choices, index = prompt * n + sample, as vLLM numbers them) and `echo` (the prompt, and with
// `logprobs` its logprobs, before the completion). The shared fields are openai_request.cc's;
// generating and answering is openai_response.cc's.
#include <utility>

#include "server/api_json.h"
#include "server/api_server.h"
#include "server/openai_request.h"
#include "server/request_builder.h"

namespace mlaserve {
namespace {

using nlohmann::json;
using api::SendError;

Status CheckCompletionFields(const json& body) {
  return CheckOpenAiFields(body, {{"prompt"}, {"echo"},
                                  {"tools", "tools are for /v1/chat/completions", "[]"},
                                  {"tool_choice", "tools are for /v1/chat/completions", R"("none")"},
                                  {"parallel_tool_calls", "tools are for /v1/chat/completions"},
                                  {"suffix", "fill-in-the-middle (suffix) is not implemented"},
                                  {"best_of", "best_of other than 1 is not implemented", "1"}});
}

Result<std::vector<OpenAiPrompt>> ReadCompletionPrompts(const json& body, const Tokenizer& tokenizer) {
  if (!body.contains("prompt") || body["prompt"].is_null()) return Status::Error("'prompt' is required");
  const json& prompt = body["prompt"];
  std::vector<OpenAiPrompt> prompts;
  auto from_text = [&](const json& text, const std::string& name) -> Status {
    auto ids = EncodePromptText(tokenizer, text.get<std::string>(), name);
    if (!ids.ok()) return ids.status();
    prompts.push_back({std::move(ids).value(), text.get<std::string>()});
    return Status::Ok();
  };
  auto from_ids = [&](const json& ids, const std::string& name) -> Status {
    auto read = PromptIdsFromJson(ids, int(tokenizer.vocab_size()), name,
                                  "'" + name + "' as token ids must be a list of integers");
    if (!read.ok()) return read.status();
    if (read->empty()) return Status::Error("'" + name + "' is empty");
    prompts.push_back({std::move(read).value(), ""});
    return Status::Ok();
  };
  if (prompt.is_string()) {
    MLA_RETURN_IF_ERROR(from_text(prompt, "prompt"));
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    MLA_RETURN_IF_ERROR(from_ids(prompt, "prompt"));
  } else if (prompt.is_array() && !prompt.empty()) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string name = "prompt[" + std::to_string(i) + "]";
      if (prompt[i].is_string()) {
        MLA_RETURN_IF_ERROR(from_text(prompt[i], name));
      } else if (prompt[i].is_array()) {
        MLA_RETURN_IF_ERROR(from_ids(prompt[i], name));
      } else {
        return Status::Error("'" + name + "' must be a string or a list of token ids");
      }
    }
  } else {
    return Status::Error("'prompt' must be a string, a list of token ids, or a list of those");
  }
  return prompts;
}

}  // namespace

void ApiServer::HandleCompletions(const json& body, HttpResponseWriter& w) {
  if (Status s = CheckCompletionFields(body); !s.ok()) return SendError(w, 400, s.message());
  if (!CheckServedModel(body, w)) return;
  auto prompts = ReadCompletionPrompts(body, tokenizer_);
  if (!prompts.ok()) return SendError(w, 400, prompts.error());
  const auto fields = ReadOpenAiFields(body, OpenAiEndpoint::kCompletions, prompts->size(), /*stream_reasoning=*/true);
  if (!fields.ok()) return SendError(w, 400, fields.error());
  RespondOpenAi(body, OpenAiEndpoint::kCompletions, *fields, std::move(prompts).value(), ChatReplyFormat{}, w);
}

}  // namespace mlaserve
