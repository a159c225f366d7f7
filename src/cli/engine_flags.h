// The scheduler flags, with SGLang's names and defaults, shared by serve and bench-offline.
#pragma once

#include "cli/args.h"
#include "engine/engine_types.h"

namespace mlaserve::cli {

// Reads --max-running-requests, --chunked-prefill-size, --max-prefill-tokens,
// --schedule-policy, --schedule-conservativeness, --disable-radix-cache, --decode-log-interval.
// Bad values are reported through args.Finish() or the returned Status.
Result<EngineOptions> ReadEngineFlags(Args& args);

// Tokens one forward call must hold for these options: a prefill chunk plus one decode token
// per running request (the model's max_batch_tokens).
int ForwardTokensFor(const EngineOptions& options);

}  // namespace mlaserve::cli
