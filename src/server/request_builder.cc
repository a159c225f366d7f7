#include "server/request_builder.h"

#include <utility>

#include "server/client_json.h"

namespace mlaserve {

Result<std::vector<TokenId>> EncodePromptText(const Tokenizer& tokenizer, const std::string& text,
                                              const std::string& name) {
  if (text.empty()) return Status::Error("'" + name + "' is empty");
  auto ids = tokenizer.Encode(text, tokenizer.add_bos());
  if (!ids.ok()) return Status::Error("'" + name + "': " + ids.error());
  return std::move(ids).value();
}

Result<std::vector<TokenId>> PromptIdsFromJson(const nlohmann::json& ids, int vocab_size, const std::string& name,
                                               const std::string& not_ids_error) {
  std::vector<TokenId> out;
  for (const nlohmann::json& id : ids) {
    if (!id.is_number_integer()) return Status::Error(not_ids_error);
    const TokenId token = TokenIdFromJson(id);
    if (token < 0 || token >= vocab_size) {
      return Status::Error("'" + name + "' item " + id.dump() + " is outside the vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
    }
    out.push_back(token);
  }
  return out;
}

Status CheckGenerations(int n, int64_t total) {
  if (n >= 1 && total <= kMaxGenerations) return Status::Ok();
  return Status::Error("'n' times the number of prompts must be in [1, " + std::to_string(kMaxGenerations) + "]");
}

GenerateRequest BuildGenerateRequest(std::vector<TokenId> input_ids, SamplingParams sampling,
                                     const LogprobRequest& logprobs) {
  GenerateRequest req;
  req.input_ids = std::move(input_ids);
  req.sampling = std::move(sampling);
  req.sampling.return_logprob = logprobs.return_logprob;
  req.sampling.top_logprobs_num = logprobs.top_logprobs_num;
  req.logprob_start_len = logprobs.logprob_start_len;
  return req;
}

}  // namespace mlaserve
