// profd's log: one line per event on stderr, "I/W/E <time> <component>] message". Thread-safe.
// Messages carry text from untrusted peers (agent labels, process names, paths), so a line is
// escaped (Printable, common/printable.h) before it is written: one call is always one
// line, whatever the text holds. What peers can cause many times goes through a LogBudget.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace profd {

enum class Severity { kInfo, kWarning, kError };

void LogLine(Severity severity, std::string_view component, std::string_view message);

// Lines a peer can cause again and again (refused connections, dropped datagrams): at most
// `lines` per 10 s, then one line saying how many were left out, so that no peer, and no number
// of processes, can flood profd's log. Not thread-safe: one per thread that logs such lines.
class LogBudget {
 public:
  // what: the lines' subject for the summary ("agent connections refused"); where_counted: where
  // the left-out ones can still be seen ("see /metrics: ...").
  LogBudget(std::string component, std::string what, Severity severity, int lines,
            std::string where_counted = "");
  void Log(const std::string& line);
  void Summarize(absl::Time now);  // says how many lines were left out, once per interval

 private:
  const std::string component_;
  const std::string what_;
  const Severity severity_;
  const int lines_per_interval_;
  const std::string where_counted_;
  absl::Time window_start_ = absl::InfinitePast();
  int lines_ = 0;
  uint64_t left_out_ = 0;
};

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
