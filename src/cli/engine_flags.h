// The scheduler flags, with SGLang's names and defaults, shared by the commands that run the
// engine (serve, batch, bench-offline), and the forward size they imply.
#pragma once

#include "cli/args.h"
#include "cli/model_setup.h"
#include "engine/engine_types.h"

namespace mlaserve::cli {

// Reads --max-running-requests, --chunked-prefill-size, --max-prefill-tokens,
// --schedule-policy, --schedule-conservativeness, --disable-radix-cache, --decode-log-interval,
// and sizes the forward calls of model_flags (read with ForwardSize::kEngineStep) for one
// engine step: --max-batch-tokens when given (refused below what a step may forward), else
// exactly that. Bad values are reported through args.Finish().
EngineOptions ReadEngineFlags(Args& args, ModelFlags& model_flags);

}  // namespace mlaserve::cli
