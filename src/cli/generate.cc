// mlaserve generate: one prompt, streamed text, and a timing line.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/log.h"
#include "engine/sampler.h"
#include "engine/sequence_runner.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

namespace mlaserve::cli {

int RunGenerate(Args& args) {
  ModelFlags model_flags = ReadModelFlags(args);
  const auto prompt = args.OptStr("prompt", "the prompt text (required)");
  const int max_new_tokens = args.Int("max-new-tokens", 128, "tokens to generate at most", {.min = 0});
  SamplingParams sampling;
  sampling.temperature = float(args.Double("temperature", 0.0, "0: greedy", {.min = 0}));
  sampling.top_p = float(args.Double("top-p", 1.0, "nucleus sampling mass", {.above = 0, .max = 1}));
  sampling.top_k = args.Int("top-k", 0, "sample among the k likeliest tokens; 0: all", {.min = 0});
  sampling.seed = uint64_t(args.Int64("seed", 0, "sampling seed"));
  const bool chat = args.Switch("chat", "format the prompt as one user turn with the model's chat template");
  const std::string chat_template_file = args.Str("chat-template", "", "with --chat: a Jinja chat template file",
                                                  {.value_name = "FILE", .shown_default = "the model's"});
  const bool ignore_eos = args.Switch("ignore-eos", "keep generating past the end-of-sequence token");
  if (!prompt) args.Reject("--prompt is required");
  if (auto exit_code = args.Finish()) return *exit_code;

  auto loaded = LoadModel(model_flags, /*need_tokenizer=*/true);
  if (!loaded.ok()) return Fail("generate", loaded.error());
  Model& model = *loaded->model;
  const Tokenizer& tokenizer = *loaded->tokenizer;

  std::string text = *prompt;
  bool add_bos = tokenizer.add_bos();
  if (chat) {
    auto chat_template =
        ChatTemplate::ForModel(TokenizerPath(model_flags), chat_template_file, tokenizer, model.config().model_type);
    if (!chat_template.ok()) return Fail("generate", chat_template.error());
    const ChatMessage message{"user", *prompt};
    auto formatted = chat_template->Render(std::span(&message, 1), /*add_generation_prompt=*/true);
    if (!formatted.ok()) return Fail("generate", formatted.error());
    text = *formatted;
    add_bos = false;  // the template writes it
  }
  auto ids = tokenizer.Encode(text, add_bos);
  if (!ids.ok()) return Fail("generate", ids.error());
  if (ids->empty()) return Fail("generate", "the prompt encodes to no tokens", 2);
  if (int64_t(ids->size()) + max_new_tokens > model.max_context()) {
    return Fail("generate", "prompt (" + std::to_string(ids->size()) + " tokens) plus " +
                                "--max-new-tokens exceeds the context length " +
                                std::to_string(model.max_context()), 2);
  }

  auto created = SequenceRunner::Create(model, *loaded->kernels, loaded->kv_cache);
  if (!created.ok()) return Fail("generate", created.error());
  SequenceRunner& runner = **created;
  if (KvFormatUsesTensorScale(loaded->kv_cache.kv_format)) {
    Log(LogLevel::kInfo, "[mlaserve] kv scales: %s", loaded->kv_scales_source.c_str());
  }
  Log(LogLevel::kInfo, "[mlaserve] model=%s, kv_cache_dtype=%s, %s", model_flags.model_path.c_str(),
      KvFormatName(loaded->kv_cache.kv_format), loaded->kv_budget.log_line.c_str());
  if (runner.allocator().capacity_tokens() < int64_t(ids->size()) + max_new_tokens) {
    return Fail("generate", "the KV budget holds " + std::to_string(loaded->kv_budget.max_total_num_tokens) +
                                " tokens, fewer than this request needs (" +
                                std::to_string(ids->size() + size_t(max_new_tokens)) + ")", 2);
  }
  Sampler sampler(model.config().vocab_size);
  StreamDecoder decoder(tokenizer);
  using Clock = std::chrono::steady_clock;

  std::fputs(*prompt == text ? prompt->c_str() : "", stdout);
  const auto t0 = Clock::now();
  if (Status s = runner.Append(*ids); !s.ok()) return Fail("generate", s.message());
  const auto t1 = Clock::now();
  int generated = 0;
  const std::optional<TokenId> eos = tokenizer.eos_id();
  while (generated < max_new_tokens) {
    const TokenId next = sampler.Sample(runner.last_logits(), sampling, runner.num_tokens());
    if (!ignore_eos && eos && next == *eos) break;
    std::fputs(decoder.Push(next).c_str(), stdout);
    std::fflush(stdout);
    if (++generated == max_new_tokens) break;
    if (Status s = runner.Append(std::span(&next, 1)); !s.ok()) return Fail("generate", s.message());
  }
  std::fputs(decoder.Flush().c_str(), stdout);
  std::fputs("\n", stdout);
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  Log(LogLevel::kInfo,
      "[mlaserve] prompt: %zu tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s "
      "| kernels: %s, threads: %d",
      ids->size(), double(ids->size()) / std::max(prefill_s, 1e-9), generated,
      double(generated) / std::max(decode_s, 1e-9), loaded->kernels->name,
      model.pool().num_threads());
  return 0;
}

}  // namespace mlaserve::cli
