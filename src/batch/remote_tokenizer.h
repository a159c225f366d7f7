// The tokenizer a running mlaserve server uses, fetched from it (GET /tokenizer_file/NAME for
// each of Tokenizer::kFileNames) so that `mlaserve batch` encodes prompts exactly as the server
// would, from any directory or machine, without a copy of the model. The chat format follows
// from the tokenizer's role tokens and /get_model_info's model_type (ChatFormatFor).
#pragma once

#include <string>

#include "core/status.h"
#include "server/http_client.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::batch {

// Errors: the server has no such route (an SGLang server: use its model_path on disk instead),
// or a file is unreadable / malformed.
Result<Tokenizer> FetchTokenizer(const std::string& base_url, const HttpHeaders& headers, int timeout_ms);

}  // namespace mlaserve::batch
