// Who a process is, read from /proc by profd (never taken from what the agent says): executable,
// command line, owner, and the container and pod it runs in, from its cgroup path. Every read is
// bounded: a process chooses its own command line, and profd copies it into each `profctl
// agents` answer and each trace.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace profd {

struct ProcessIdentity {
  std::string exe;
  std::string command_line;  // arguments joined by spaces; cut at kMaxCommandLineBytes
  std::string comm;
  std::string container_id;  // 64-hex id from the cgroup path, if any
  std::string pod_uid;       // Kubernetes pod UID from the cgroup path, if any
};

// Longer command lines are cut there and end with kCommandLineCutMark.
inline constexpr size_t kMaxCommandLineBytes = 4096;
inline constexpr char kCommandLineCutMark[] = " [cut at 4096 bytes]";

// Reads <proc_root>/<pid>. `alive`, when given, is asked once the folder is open: the files are
// read through that folder, which stays the process's own, but if the process had already
// exited its pid may belong to another one by then, so nothing is read (NotFound).
absl::StatusOr<ProcessIdentity> ReadProcessIdentity(pid_t pid,
                                                    const std::function<bool()>& alive = {},
                                                    absl::string_view proc_root = "/proc");

// Exposed for tests: extracts container id and pod uid from the text of /proc/<pid>/cgroup.
void ParseCgroup(absl::string_view cgroup_text, ProcessIdentity* identity);

}  // namespace profd
