#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace infercept {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* s = std::getenv("INFERCEPT_LOG");
    if (s == nullptr) return LogLevel::warn;
    if (std::strcmp(s, "error") == 0) return LogLevel::error;
    if (std::strcmp(s, "info") == 0) return LogLevel::info;
    if (std::strcmp(s, "debug") == 0) return LogLevel::debug;
    return LogLevel::warn;
  }();
  return level;
}

void log_message(LogLevel level, const char* fmt, ...) {
  if ((int)level > (int)log_level()) return;
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "[infercept %s] ", names[(int)level]);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

}  // namespace infercept
