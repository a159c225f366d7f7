// Reads a whole file into memory, for the small text inputs (configs, JSON, sample text).
// Checkpoint tensors are mmapped instead (model/safetensors.h).
#pragma once

#include <string>

#include "core/status.h"

namespace mlaserve {

// The file's bytes; the error names the path ("PATH: cannot open").
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace mlaserve
