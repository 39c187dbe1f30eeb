#pragma once

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace cohort {

// Minimal line logger to stderr: "<time> <LEVEL> <component>] message". One write(2) per line so
// lines from several threads never interleave.
// kNone prints nothing, errors included: for fuzz targets, which fail jobs thousands of times a
// second.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kNone = 4 };

// Sets the component prefix and the lowest level printed (COHORT_LOG_LEVEL=debug|info|warning|error
// overrides the level). Also turns off Abseil's mutex deadlock detector, which Debian's Abseil
// build leaves on: it cost ~8% of the coordination service's CPU on the barrier benchmark.
void InitLogging(absl::string_view component);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, absl::string_view message);

template <typename... Args>
void LogDebug(const Args&... args) {
  if (LogEnabled(LogLevel::kDebug)) LogLine(LogLevel::kDebug, absl::StrCat(args...));
}
template <typename... Args>
void LogInfo(const Args&... args) {
  if (LogEnabled(LogLevel::kInfo)) LogLine(LogLevel::kInfo, absl::StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  if (LogEnabled(LogLevel::kWarning)) LogLine(LogLevel::kWarning, absl::StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  if (LogEnabled(LogLevel::kError)) LogLine(LogLevel::kError, absl::StrCat(args...));
}

}  // namespace cohort
