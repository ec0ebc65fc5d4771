// engine/log.h — the shim's logger: silent unless RDS_PRELOAD_LOG_LEVEL asks.
//
// A good guest prints nothing by default. Messages go to stderr or to
// RDS_PRELOAD_LOG_FILE, one line each, prefixed with the pid, through raw
// system calls (never re-entering the interposed write()).
//
// Thread-safety: safe for concurrent use.
#ifndef RDS_ENGINE_LOG_H_
#define RDS_ENGINE_LOG_H_

#include <string>

#include "absl/strings/str_format.h"

namespace rds::log {

enum class Level { kError = 1, kWarn = 2, kInfo = 3, kDebug = 4, kTrace = 5 };

bool Enabled(Level level);
// Fork child: reopen the log destination on next use.
void ResetAfterFork();
void Emit(Level level, const std::string& text);

template <typename... Args>
void Error(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (Enabled(Level::kError)) Emit(Level::kError, absl::StrFormat(fmt, args...));
}
template <typename... Args>
void Warn(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (Enabled(Level::kWarn)) Emit(Level::kWarn, absl::StrFormat(fmt, args...));
}
template <typename... Args>
void Info(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (Enabled(Level::kInfo)) Emit(Level::kInfo, absl::StrFormat(fmt, args...));
}
template <typename... Args>
void Debug(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (Enabled(Level::kDebug)) Emit(Level::kDebug, absl::StrFormat(fmt, args...));
}
template <typename... Args>
void Trace(const absl::FormatSpec<Args...>& fmt, const Args&... args) {
  if (Enabled(Level::kTrace)) Emit(Level::kTrace, absl::StrFormat(fmt, args...));
}

}  // namespace rds::log

#endif  // RDS_ENGINE_LOG_H_
