// Writing a command's --json results.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace mlaserve::cli {

// Writes `value` as 2-space-indented JSON and a newline to `path` (replacing it). The error, if
// the file cannot be opened, written or closed, names the path.
Status WriteJsonFile(const std::string& path, const nlohmann::json& value);

}  // namespace mlaserve::cli
