// The scheduler flags, with SGLang's names and defaults, shared by serve and bench-offline.
#pragma once

#include "cli/args.h"
#include "engine/engine_types.h"

namespace mlaserve::cli {

// Reads --max-running-requests, --chunked-prefill-size, --max-prefill-tokens,
// --schedule-policy, --schedule-conservativeness, --disable-radix-cache, --decode-log-interval.
// Bad values are reported through args.Finish() or the returned Status.
Result<EngineOptions> ReadEngineFlags(Args& args);

}  // namespace mlaserve::cli
