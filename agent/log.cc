#include "agent/log.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace profagent {
namespace {

int Verbosity() {
  static const int verbosity = [] {
    const char* v = std::getenv("PROFD_AGENT_LOG");
    return v ? std::atoi(v) : 1;
  }();
  return verbosity;
}

}  // namespace

void Log(LogLevel level, const char* format, ...) {
  if (static_cast<int>(level) > Verbosity()) return;
  char line[512];
  int n = std::snprintf(line, sizeof(line), "[profagent %d] ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  int m = std::vsnprintf(line + n, sizeof(line) - n - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(m, sizeof(line) - n - 2));
  line[len++] = '\n';
  // One write(2): lines from several threads do not interleave, and no stdio lock is taken.
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
}

}  // namespace profagent
