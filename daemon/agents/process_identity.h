// Who a process is, read from /proc by profd (never taken from what the agent says): executable,
// command line, owner, and the container and pod it runs in, from its cgroup path.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/strings/string_view.h"

namespace profd {

struct ProcessIdentity {
  std::string exe;
  std::string command_line;  // arguments joined by spaces
  std::string comm;
  std::string container_id;  // 64-hex id from the cgroup path, if any
  std::string pod_uid;       // Kubernetes pod UID from the cgroup path, if any
};

ProcessIdentity ReadProcessIdentity(pid_t pid, absl::string_view proc_root = "/proc");

// Exposed for tests: extracts container id and pod uid from the text of /proc/<pid>/cgroup.
void ParseCgroup(absl::string_view cgroup_text, ProcessIdentity* identity);

}  // namespace profd
