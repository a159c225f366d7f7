#include "engine/log_line.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace mlaserve {

void LogLine(const char* fmt, ...) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char body[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(body, sizeof body, fmt, args);
  va_end(args);
  std::fprintf(stderr, "[%s] %s\n", stamp, body);
}

}  // namespace mlaserve
