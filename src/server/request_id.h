// Server-made request ids: a prefix and 128 random bits from the kernel's CSPRNG, as SGLang and
// OpenAI make theirs (uuid4). Nothing about one id predicts another, so a client cannot name
// (and abort) a request that is not its own. Client-chosen ids (`rid`) are the client's
// responsibility.
#pragma once

#include <string>
#include <string_view>

namespace mlaserve {

// prefix + 32 lowercase hex digits, e.g. "cmpl-3f9c...". Thread-safe.
std::string NewRequestId(std::string_view prefix);

}  // namespace mlaserve
