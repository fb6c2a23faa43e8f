// profd's log: one line per event on stderr, "I/W/E <time> <component>] message". Thread-safe.
#pragma once

#include <string_view>

#include "absl/strings/str_format.h"

namespace profd {

enum class Severity { kInfo, kWarning, kError };

void LogLine(Severity severity, std::string_view component, std::string_view message);

template <typename... Args>
void LogInfo(std::string_view component, const absl::FormatSpec<Args...>& format,
             const Args&... args) {
  LogLine(Severity::kInfo, component, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(std::string_view component, const absl::FormatSpec<Args...>& format,
                const Args&... args) {
  LogLine(Severity::kWarning, component, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(std::string_view component, const absl::FormatSpec<Args...>& format,
              const Args&... args) {
  LogLine(Severity::kError, component, absl::StrFormat(format, args...));
}

}  // namespace profd
