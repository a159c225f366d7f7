// Typed reads of optional JSON fields for the tokenizer's file loaders, with one-line errors
// that name the file and field ("tokenizer.json: model.ignore_merges must be a boolean").
// Also the one place file text becomes JSON, so nlohmann's exceptions stop here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mlaserve {

// Parses `text`; the error names `source` and carries the parser's position message.
Result<nlohmann::json> ParseJsonText(std::string_view text, const std::string& source);

// `where` prefixes field names in errors: "tokenizer.json: model" for a section's fields,
// "tokenizer_config.json: " (note the trailing space) for top-level ones.
Status ReadOptionalBool(const nlohmann::json& object, std::string_view key,
                        const std::string& where, bool fallback, bool* out);
Status ReadOptionalString(const nlohmann::json& object, std::string_view key,
                          const std::string& where, std::optional<std::string>* out);
// An integer id in [0, 2^24): vocabularies are far smaller, and this bounds table sizes.
Status ReadTokenId(const nlohmann::json& value, const std::string& where, int32_t* out);
// The same check without building an error message, for loops over 100K+ entries.
bool TryReadTokenId(const nlohmann::json& value, int32_t* out);

}  // namespace mlaserve
