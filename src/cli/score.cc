// mlaserve score: each token's log-probability given the tokens before it (the first is null)
// and the perplexity, as JSON: the numbers SGLang returns as input_token_logprobs.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "engine/sequence_runner.h"

namespace mlaserve::cli {
namespace {

Result<std::vector<TokenId>> ParseIdList(const std::string& text) {
  std::vector<TokenId> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 0x7fffffff) {
      return Status::Error("--input-ids: '" + item + "' is not a token id");
    }
    ids.push_back(TokenId(v));
  }
  return ids;
}

// log softmax(logits)[target]
double LogProb(const float* logits, int vocab, TokenId target) {
  float max = logits[0];
  for (int i = 1; i < vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max);
  return double(logits[target]) - max - std::log(sum);
}

}  // namespace

int RunScore(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const auto text = args.OptStr("text", "text to score (or --input-ids)");
  const auto input_ids = args.OptStr("input-ids", "token ids to score, comma-separated (or --text)",
                                     {.value_name = "ID,ID,..."});
  const bool no_bos = args.Switch("no-bos", "do not prepend the tokenizer's BOS token to --text");
  if (text.has_value() == input_ids.has_value()) args.Reject("give exactly one of --text or --input-ids");
  if (auto exit_code = args.Finish()) return *exit_code;
  std::vector<TokenId> ids;
  if (input_ids) {
    auto parsed = ParseIdList(*input_ids);
    if (!parsed.ok()) return Fail("score", parsed.error(), 2);
    ids = std::move(parsed).value();
  }
  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/text.has_value());
  if (!loaded.ok()) return Fail("score", loaded.error());
  Model& model = *loaded->model;
  const int vocab = model.config().vocab_size;

  if (text) {
    auto encoded = loaded->tokenizer->Encode(*text, loaded->tokenizer->add_bos() && !no_bos);
    if (!encoded.ok()) return Fail("score", encoded.error());
    ids = std::move(encoded).value();
  }
  if (ids.empty()) return Fail("score", "nothing to score: no tokens", 2);

  std::vector<double> logprobs(ids.size(), 0.0);
  auto created = SequenceRunner::Create(model, *loaded->kernels, loaded->kv_cache);
  if (!created.ok()) return Fail("score", created.error());
  SequenceRunner& runner = **created;
  auto sink = [&](int first, int count, const float* logits) {
    for (int i = 0; i < count; ++i) {
      const size_t next = size_t(first + i + 1);
      if (next < ids.size()) logprobs[next] = LogProb(logits + size_t(i) * vocab, vocab, ids[next]);
    }
  };
  SequenceRunner::LogitsSink sink_ref(sink);
  if (Status s = runner.Append(ids, &sink_ref); !s.ok()) return Fail("score", s.message());

  nlohmann::json out;
  out["input_ids"] = ids;
  nlohmann::json lp = nlohmann::json::array();
  double sum = 0.0;
  lp.push_back(nullptr);
  for (size_t i = 1; i < ids.size(); ++i) {
    lp.push_back(logprobs[i]);
    sum += logprobs[i];
  }
  out["token_logprobs"] = lp;
  out["num_scored_tokens"] = ids.size() - 1;
  if (ids.size() > 1) out["perplexity"] = std::exp(-sum / double(ids.size() - 1));
  else out["perplexity"] = nullptr;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace mlaserve::cli
