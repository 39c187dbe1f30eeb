#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/env.h"

namespace cohort {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::string* g_component = new std::string("cohort");

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kNone:
      break;
  }
  return "?";
}
}  // namespace

void InitLogging(absl::string_view component) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  *g_component = std::string(component);
  if (const char* env = std::getenv(env::kLogLevel)) {
    std::string v = absl::AsciiStrToLower(env);
    if (v == "debug") SetLogLevel(LogLevel::kDebug);
    if (v == "info") SetLogLevel(LogLevel::kInfo);
    if (v == "warning" || v == "warn") SetLogLevel(LogLevel::kWarning);
    if (v == "error") SetLogLevel(LogLevel::kError);
  }
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void LogLine(LogLevel level, absl::string_view message) {
  std::string line =
      absl::StrCat(absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()), " ",
                   LevelName(level), " ", *g_component, "] ", message, "\n");
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace cohort
