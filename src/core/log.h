// Minimal leveled logging to stderr. The level comes from INFERCEPT_LOG (error, warn, info,
// debug); the default is warn so that CLI output stays clean.
#pragma once

#include <cstdarg>

namespace infercept {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

LogLevel log_level();
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace infercept

#define LOG_ERROR(...) ::infercept::log_message(::infercept::LogLevel::error, __VA_ARGS__)
#define LOG_WARN(...) ::infercept::log_message(::infercept::LogLevel::warn, __VA_ARGS__)
#define LOG_INFO(...) ::infercept::log_message(::infercept::LogLevel::info, __VA_ARGS__)
#define LOG_DEBUG(...) ::infercept::log_message(::infercept::LogLevel::debug, __VA_ARGS__)
