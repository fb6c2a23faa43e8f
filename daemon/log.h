// profd's log: one line per event on stderr, "I/W/E <time> <component>] message". Thread-safe.
// Messages carry text from untrusted peers (agent labels, process names, paths), so a line is
// escaped before it is written: one call is always one line, whatever the text holds.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace profd {

enum class Severity { kInfo, kWarning, kError };

void LogLine(Severity severity, std::string_view component, std::string_view message);

// The text with every control character, invalid UTF-8 byte and character that would move or
// reorder the line (line and paragraph separators, bidirectional overrides) written as an escape:
// \n, \r, \t, \\, \xNN for bytes, \u{NNNN} for characters. Printable ASCII and other valid UTF-8
// stay as they are.
std::string EscapeForLog(std::string_view text);

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
