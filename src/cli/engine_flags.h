// The scheduler flags, with SGLang's names and defaults, shared by the commands that run the
// engine (serve, batch, bench-offline), and the forward size they imply.
#pragma once

#include <memory>

#include "cli/args.h"
#include "cli/model_setup.h"
#include "engine/drafter.h"
#include "engine/engine_types.h"
#include "model/draft_model.h"

namespace mlaserve::cli {

// Reads --max-running-requests, --chunked-prefill-size, --max-prefill-tokens,
// --schedule-policy, --schedule-conservativeness, --disable-radix-cache, --decode-log-interval,
// and sizes the forward calls of model_flags (read with ForwardSize::kEngineStep) for one
// engine step: --max-batch-tokens when given (refused below what a step may forward), else
// exactly that. Bad values are reported through args.Finish().
// Speculative decoding: --speculative-algorithm NGRAM|NEXTN|EAGLE3 with SGLang's
// --speculative-num-steps, --speculative-eagle-topk (1), --speculative-num-draft-tokens and
// --speculative-draft-model-path (EAGLE3); NEXTN asks model_flags to load the checkpoint's MTP
// layer, EAGLE3 to capture the draft's target layers (its config is read here: one line naming a
// bad one), and both count the draft's cache in the KV budget.
EngineOptions ReadEngineFlags(Args& args, ModelFlags& model_flags);

// The drafter options.speculative_algorithm names, made once the model and the engine's KV
// exist, and attached (options.drafter; left null when speculation is off). It owns what it
// made; keep it alive as long as the engine.
struct EngineDrafter {
  std::unique_ptr<HostKvStorage> mtp_kv;   // NEXTN: the MTP layer's cache, over kv's page ids
  std::unique_ptr<DraftModel> draft_model;  // NEXTN, EAGLE3: what the drafter runs
  std::unique_ptr<Drafter> drafter;
};
Result<EngineDrafter> AttachDrafter(EngineOptions& options, LoadedModel& loaded, const EngineKv& kv);

}  // namespace mlaserve::cli
