// The agent's only output: short lines on stderr of the profiled process, prefixed so they are
// easy to attribute. PROFD_AGENT_LOG=0 silences it, 1 (default) warns, 2 adds informational lines.
#pragma once

namespace profagent {

enum class LogLevel { kWarning = 1, kInfo = 2 };

void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace profagent
