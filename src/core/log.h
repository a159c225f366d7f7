// The program's one logger: every log line goes through Log(), which drops lines below the
// process's level (--log-level) and writes the rest to stderr in SGLang's format, so SGLang's
// lines (the batch lines, cache flushes) read exactly as SGLang writes them.
//
// The level is process-wide, set once at start-up from the command line and read by every
// thread; the command-line tools' reports and progress lines (batch, bench-serving) and usage
// errors are their output, not logs, and do not pass through here.
#pragma once

#include <string_view>

#include "core/status.h"

namespace mlaserve {

enum class LogLevel { kDebug, kInfo, kWarning, kError };  // least to most severe

// SGLang's --log-level names: "debug", "info", "warning", "error".
[[nodiscard]] Result<LogLevel> ParseLogLevel(std::string_view name);

// Lines below `level` are dropped from now on; kInfo until set.
void SetLogLevel(LogLevel level);
[[nodiscard]] bool LogEnabled(LogLevel level);

// Writes "[YYYY-MM-DD HH:MM:SS] <message>\n" (local time) to stderr when `level` is enabled, in
// one write, so lines from different threads do not interleave.
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace mlaserve
