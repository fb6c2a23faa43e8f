#include "daemon/log.h"

#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace profd {

void LogLine(Severity severity, std::string_view component, std::string_view message) {
  const char tag = severity == Severity::kInfo ? 'I' : severity == Severity::kWarning ? 'W' : 'E';
  std::string line =
      absl::StrFormat("%c %s %s] %s\n", tag,
                      absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()),
                      component, message);
  // One write(2) per line so lines from several threads never interleave.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace profd
