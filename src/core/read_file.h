// Reads a whole file into memory, for the small text inputs (configs, JSON, sample text).
// Checkpoint tensors are mmapped instead (model/safetensors.h).
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace mlaserve {

// The file's bytes; the error names the path ("PATH: cannot open").
Result<std::string> ReadWholeFile(const std::string& path);

// The same for a file that must be a regular file of at most `max_bytes` (a chat template,
// tokenizer_config.json): a directory, a device (/dev/zero) or a FIFO is refused before any
// read, and a longer file after reading max_bytes + 1, so the read always ends.
Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes);

}  // namespace mlaserve
