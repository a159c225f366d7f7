// The engine's log lines: "[YYYY-mm-dd HH:MM:SS] message" on stderr, SGLang's format.
#pragma once

namespace mlaserve {

void LogLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mlaserve
