// The tokenizer a running mlaserve server uses, fetched from it (GET /tokenizer_file/NAME for
// each of Tokenizer::kFileNames) so that `mlaserve batch` encodes prompts exactly as the server
// would, from any directory or machine, without a copy of the model; and the chat template it
// renders (GET /tokenizer_file/chat_template.jinja), or, for a server without one, the built-in
// format for the tokenizer's role tokens and /get_model_info's model_type (ChatFormatFor).
#pragma once

#include <string>

#include "core/status.h"
#include "server/http_client.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve::batch {

// Errors: the server has no such route (an SGLang server: use its model_path on disk instead),
// or a file is unreadable / malformed.
struct RemoteTokenizer {
  Tokenizer tokenizer;
  ChatTemplate chat_template;  // chat_template_file when given (--chat-template)
};
Result<RemoteTokenizer> FetchTokenizer(const std::string& base_url, const HttpHeaders& headers, int timeout_ms,
                                       std::string_view model_type, const std::string& chat_template_file);

}  // namespace mlaserve::batch
