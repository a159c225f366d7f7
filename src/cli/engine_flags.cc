#include "cli/engine_flags.h"

#include <optional>

#include "batch/hidden_dump.h"
#include "core/log.h"
#include "engine/model_drafter.h"
#include "model/eagle3_draft.h"
#include "model/mtp_draft.h"

namespace mlaserve::cli {
namespace {

// Tokens one forward call must hold for these options: a prefill chunk plus one decode token
// per running request.
int ForwardTokensFor(const EngineOptions& o) {
  const int chunk = o.chunked_prefill_size > 0 ? o.chunked_prefill_size : 2048;
  return chunk + o.max_running_requests;
}

// EAGLE3: the draft's config against the target's, the target layers to capture, and what the
// draft takes from the memory budget.
void ReadEagle3Flags(Args& args, const std::string& draft_path, ModelFlags& model_flags) {
  if (model_flags.tp_size > 1) {
    return args.Reject("--speculative-algorithm EAGLE3 is not supported with tensor parallelism (--tp-size > 1)");
  }
  auto draft = ReadEagle3Config(draft_path);
  if (!draft.ok()) return args.Reject(draft.error());
  if (model_flags.model_path.empty()) return;  // (--model-path's own error is reported)
  auto target = LoadModelConfig(model_flags.model_path);
  if (!target.ok()) return;  // (the model's load reports it)
  auto layers = draft->CaptureLayers(target->num_hidden_layers);
  if (!layers.ok()) return args.Reject(layers.error());
  model_flags.options.capture_layers = *layers;
  model_flags.draft_kv_bytes_per_token = draft->kv_bytes_per_token();
  // (Its files' bytes: a little more than the packed weights it keeps, so the pool errs small.)
  model_flags.draft_weight_bytes = draft->checkpoint_bytes;
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

  // Speculative decoding (docs/architecture.md, "Speculative decoding"): SGLang's flags. NGRAM
  // drafts by prompt lookup in the request's own tokens; NEXTN runs the checkpoint's MTP layer;
  // EAGLE3 an EAGLE-3 draft checkpoint (SGLang: --speculative-num-steps drafts, topk 1,
  // num-draft-tokens = steps + 1 verified).
  const std::string algorithm = args.Str("speculative-algorithm", "",
                                         "speculative decoding: NGRAM (prompt lookup in each request's own tokens), "
                                         "NEXTN (the checkpoint's MTP layer) or EAGLE3 (an EAGLE-3 draft checkpoint, "
                                         "--speculative-draft-model-path); EAGLE and STANDALONE are not implemented",
                                         {.value_name = "NAME", .shown_default = "none"});
  const std::optional<int> draft_tokens = args.OptInt(
      "speculative-num-draft-tokens",
      "NGRAM: tokens drafted per verify step (default 4); NEXTN, EAGLE3: tokens verified per step, num-steps + 1",
      {.min = 1, .max = 64});
  const std::optional<int> num_steps =
      args.OptInt("speculative-num-steps", "NEXTN, EAGLE3: draft-model steps (drafts) per verify step",
                  {.shown_default = "3", .min = 1, .max = 16});
  const std::optional<int> topk = args.OptInt(
      "speculative-eagle-topk", "NEXTN, EAGLE3: drafts per step; only 1 (a chain)", {.shown_default = "1", .min = 1});
  const std::string draft_path =
      args.Str("speculative-draft-model-path", "", "EAGLE3: the EAGLE-3 draft checkpoint's directory",
               {.value_name = "DIR", .shown_default = "none"});
  const bool fixed_drafts = args.Switch(
      "disable-adaptive-speculation",
      "draft the full count every step (SGLang's behaviour) instead of adapting each request's drafts to what its "
      "verify steps accept and pausing drafting after repeated misses");
  const bool tune_steps = args.Switch(
      "enable-speculative-step-tuning",
      "NEXTN, EAGLE3: choose the most drafts per step (0..num-steps; 0: plain decoding) by measured decode "
      "throughput, re-measured every 256 decode steps, instead of always allowing num-steps (mlaserve's; outputs "
      "do not change)");
  if ((draft_tokens || num_steps || topk || fixed_drafts || !draft_path.empty() || tune_steps) && algorithm.empty()) {
    args.Reject("--speculative-num-draft-tokens, --speculative-num-steps, --speculative-eagle-topk, "
                "--speculative-draft-model-path, --disable-adaptive-speculation and --enable-speculative-step-tuning "
                "need --speculative-algorithm (speculative decoding is off)");
  }
  if (tune_steps && algorithm == "NGRAM") {
    args.Reject("--enable-speculative-step-tuning is for NEXTN and EAGLE3 (NGRAM drafts cost no model step)");
  }
  o.tune_draft_steps = tune_steps;
  if (!draft_path.empty() && !algorithm.empty() && algorithm != "EAGLE3") {
    args.Reject("--speculative-draft-model-path is only used with EAGLE3 here" +
                std::string(algorithm == "NEXTN" ? " (NEXTN uses the checkpoint's own MTP layer)" : ""));
  }
  if (algorithm == "NGRAM") {
    if (num_steps || topk) {
      args.Reject("--speculative-num-steps and --speculative-eagle-topk are for NEXTN and EAGLE3, not NGRAM");
    }
    o.num_draft_tokens = draft_tokens.value_or(4);
  } else if (algorithm == "NEXTN" || algorithm == "EAGLE3") {
    // As SGLang with topk 1: steps from num-draft-tokens - 1 when only that is given; a
    // num-draft-tokens other than steps + 1 is adjusted to it, with a warning.
    const int steps = num_steps.value_or(draft_tokens && *draft_tokens >= 2 ? *draft_tokens - 1 : 3);
    if (topk.value_or(1) != 1) {
      args.Reject("--speculative-eagle-topk " + std::to_string(*topk) + ": tree drafts are not implemented; " +
                  algorithm + " drafts a chain (topk 1)");
    }
    if (draft_tokens && *draft_tokens != steps + 1) {
      Log(LogLevel::kWarning,
          "[mlaserve] --speculative-num-draft-tokens %d is adjusted to --speculative-num-steps + 1 = %d when "
          "--speculative-eagle-topk is 1 (as SGLang does)",
          *draft_tokens, steps + 1);
    }
    o.num_draft_tokens = steps;
    if (algorithm == "NEXTN") {
      model_flags.options.load_mtp = true;
    } else if (draft_path.empty()) {
      args.Reject("--speculative-algorithm EAGLE3 needs --speculative-draft-model-path DIR (the draft checkpoint)");
    } else {
      ReadEagle3Flags(args, draft_path, model_flags);
    }
  } else if (algorithm == "EAGLE") {
    args.Reject("--speculative-algorithm EAGLE (EAGLE-1/2 drafts) is not implemented; an EAGLE-3 draft runs with "
                "EAGLE3");
  } else if (!algorithm.empty()) {
    args.Reject("--speculative-algorithm " + algorithm +
                " is not supported by mlaserve yet (NGRAM, NEXTN and EAGLE3 are)");
  }
  o.draft_model_path = draft_path;
  o.speculative_algorithm = algorithm;
  o.adaptive_drafts = !algorithm.empty() && !fixed_drafts;

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

Result<EngineDrafter> AttachDrafter(EngineOptions& o, LoadedModel& loaded, const EngineKv& kv) {
  EngineDrafter out;
  Model& model = *loaded.model;
  if (o.speculative_algorithm == "NGRAM") {
    out.drafter = std::make_unique<NgramDrafter>();
  } else if (o.speculative_algorithm == "NEXTN") {
    KvStorageShape shape = kv.storage->shape();
    shape.num_layers = 1;  // the MTP layer's rows, at the same page ids
    auto storage = HostKvStorage::Create(shape);
    if (!storage.ok()) return storage.status();
    out.mtp_kv = std::move(storage).value();
    out.draft_model = std::make_unique<MtpDraft>(model, *loaded.kernels, *out.mtp_kv);
  } else if (o.speculative_algorithm == "EAGLE3") {
    const KvStorageShape& shape = kv.storage->shape();
    auto draft = Eagle3Draft::Load(o.draft_model_path, model, *loaded.kernels, shape.page_size, shape.num_pages);
    if (!draft.ok()) return draft.status();
    Log(LogLevel::kInfo,
        "[mlaserve] EAGLE-3 draft %s: draft vocabulary %d of %d, target layers [%s] captured, weights %.1f MB, "
        "cache %.1f MB",
        o.draft_model_path.c_str(), (*draft)->config().draft_vocab_size, (*draft)->config().vocab_size,
        batch::JoinLayers(model.capture_layers()).c_str(), double((*draft)->weight_bytes()) / 1e6,
        double((*draft)->cache_bytes()) / 1e6);
    out.draft_model = std::move(draft).value();
  }
  if (out.draft_model != nullptr) {
    out.drafter = std::make_unique<ModelDrafter>(*out.draft_model, model.max_batch_tokens(), model.max_context(),
                                                 o.num_draft_tokens);
  }
  o.drafter = out.drafter.get();
  return out;
}

}  // namespace mlaserve::cli
