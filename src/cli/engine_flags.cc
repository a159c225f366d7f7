#include "cli/engine_flags.h"

#include <optional>

#include "engine/drafter.h"

namespace mlaserve::cli {
namespace {

// Tokens one forward call must hold for these options: a prefill chunk plus one decode token
// per running request.
int ForwardTokensFor(const EngineOptions& o) {
  const int chunk = o.chunked_prefill_size > 0 ? o.chunked_prefill_size : 2048;
  return chunk + o.max_running_requests;
}

}  // namespace

EngineOptions ReadEngineFlags(Args& args, ModelFlags& model_flags) {
  EngineOptions o;
  o.max_running_requests = args.Int("max-running-requests", o.max_running_requests, "requests decoding together",
                                    {.min = 1, .max = 1 << 20});
  o.chunked_prefill_size = args.Int("chunked-prefill-size", o.chunked_prefill_size,
                                    "prefill tokens per step; <= 0: a whole prompt in one chunk",
                                    {.max = 1 << 24});
  o.max_prefill_tokens = args.Int("max-prefill-tokens", o.max_prefill_tokens, "prompt tokens admitted per step",
                                  {.min = 1});
  const std::string policy = args.Str("schedule-policy", "fcfs", "fcfs, or lpm: longest cached prefix first",
                                      {.choices = {"fcfs", "lpm"}});
  o.schedule_policy = policy == "lpm" ? SchedulePolicy::kLpm : SchedulePolicy::kFcfs;
  o.schedule_conservativeness = args.Double("schedule-conservativeness", o.schedule_conservativeness,
                                            "scales the future-token reservation at admission", {.above = 0});
  o.disable_radix_cache = args.Switch("disable-radix-cache", "no prefix cache");
  o.decode_log_interval = args.Int("decode-log-interval", o.decode_log_interval,
                                   "decode steps between \"Decode batch\" log lines", {.min = 1});

  // Speculative decoding (docs/architecture.md, "Speculative decoding"): SGLang's flags; of its
  // algorithms only NGRAM, drafting by prompt lookup in the request's own tokens.
  const std::string algorithm = args.Str("speculative-algorithm", "",
                                         "speculative decoding: NGRAM (drafts by prompt lookup in each request's own "
                                         "tokens); EAGLE, EAGLE3, NEXTN and STANDALONE are not implemented",
                                         {.value_name = "NAME", .shown_default = "none"});
  const std::optional<int> draft_tokens = args.OptInt(
      "speculative-num-draft-tokens", "tokens drafted per verify step (NGRAM)", {.shown_default = "4", .min = 1, .max = 64});
  if (draft_tokens && algorithm.empty()) {
    args.Reject("--speculative-num-draft-tokens needs --speculative-algorithm NGRAM (speculative decoding is off)");
  }
  if (!algorithm.empty() && algorithm != "NGRAM") {
    args.Reject("--speculative-algorithm " + algorithm +
                " is not supported by mlaserve yet (NGRAM is: prompt lookup, no draft model)");
  }
  for (const char* flag : {"speculative-draft-model-path", "speculative-num-steps", "speculative-eagle-topk"}) {
    args.Refuse(flag, "only --speculative-algorithm NGRAM is implemented, which takes --speculative-num-draft-tokens");
  }
  if (algorithm == "NGRAM") {
    static NgramDrafter ngram_drafter;  // stateless; shared by every request
    o.drafter = &ngram_drafter;
    o.num_draft_tokens = draft_tokens.value_or(4);
  }

  const int needed = ForwardTokensFor(o);
  model_flags.options.max_batch_tokens = model_flags.max_batch_tokens.value_or(needed);
  if (model_flags.max_batch_tokens && *model_flags.max_batch_tokens < needed) {
    args.Reject("--max-batch-tokens " + std::to_string(*model_flags.max_batch_tokens) +
                " is less than one engine step may forward: a prefill chunk of " +
                std::to_string(needed - o.max_running_requests) +
                " (--chunked-prefill-size) plus one token for each of " + std::to_string(o.max_running_requests) +
                " running requests (--max-running-requests) = " + std::to_string(needed) +
                "; omit it, or lower those");
  }
  return o;
}

}  // namespace mlaserve::cli
