#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

namespace mlaserve {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};

}  // namespace

Result<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return Status::Error("unknown log level '" + std::string(name) + "' (debug, info, warning or error)");
}

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }

bool LogEnabled(LogLevel level) { return level >= g_level.load(std::memory_order_relaxed); }

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char fixed[512];
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(fixed, sizeof fixed, fmt, args);
  va_end(args);
  std::string long_message;  // only for a line longer than `fixed`
  if (length >= int(sizeof fixed)) {
    long_message.resize(size_t(length) + 1);
    std::vsnprintf(long_message.data(), long_message.size(), fmt, again);
    long_message.pop_back();
  }
  va_end(again);
  std::fprintf(stderr, "[%s] %s\n", stamp, long_message.empty() ? fixed : long_message.c_str());
}

}  // namespace mlaserve
