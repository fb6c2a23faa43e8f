#include "daemon/log.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/printable.h"

namespace profd {
void LogLine(Severity severity, std::string_view component, std::string_view message) {
  const char tag = severity == Severity::kInfo ? 'I' : severity == Severity::kWarning ? 'W' : 'E';
  std::string line =
      absl::StrFormat("%c %s %s] %s\n", tag,
                      absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()),
                      Printable(component), Printable(message));
  // One write(2) per line so lines from several threads never interleave.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

namespace {
constexpr absl::Duration kLogBudgetInterval = absl::Seconds(10);
}  // namespace

LogBudget::LogBudget(std::string component, std::string what, Severity severity, int lines,
                     std::string where_counted)
    : component_(std::move(component)),
      what_(std::move(what)),
      severity_(severity),
      lines_per_interval_(lines),
      where_counted_(std::move(where_counted)) {}

void LogBudget::Log(const std::string& line) {
  Summarize(absl::Now());
  if (lines_ < lines_per_interval_) {
    ++lines_;
    LogLine(severity_, component_, line);
  } else {
    ++left_out_;
  }
}

void LogBudget::Summarize(absl::Time now) {
  if (now - window_start_ < kLogBudgetInterval) return;
  if (left_out_ > 0) {
    LogLine(severity_, component_,
            absl::StrCat(left_out_, " more ", what_, " in the last ",
                         absl::FormatDuration(kLogBudgetInterval), ", not logged one by one",
                         where_counted_.empty() ? "" : " (", where_counted_,
                         where_counted_.empty() ? "" : ")"));
  }
  window_start_ = now;
  lines_ = 0;
  left_out_ = 0;
}

}  // namespace profd
