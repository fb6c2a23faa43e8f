// The on-demand config profd hands Kineto for one capture, and where Kineto will write its trace.
// Keys are Kineto's (libkineto/src/Config.cpp); Kineto only warns about keys it does not know.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace profd::kineto {

struct KinetoTraceRequest {
  std::string capture_id;
  absl::Duration duration;
  absl::Time start_at = absl::InfinitePast();  // InfinitePast: as soon as Kineto reads it
  bool record_shapes = false;
  bool with_stack = false;
  bool profile_memory = false;
};

// Where Kineto writes the trace, as the process sees it. Kineto accepts on-demand output only
// under /tmp/ unless the process sets KINETO_ONDEMAND_TRACE_DIR, and inserts "_<pid>" (the pid in
// the process's own namespace) before ".json".
std::string KinetoLogFile(const std::string& capture_id);
std::string KinetoTraceFileAsWritten(const std::string& capture_id, int32_t ns_pid);

// KEY=VALUE lines: no warm-up (Kineto's default is 5 s), the duration, the start time and the
// options asked for. ACTIVITY_TYPES is left to Kineto: its default is what torch.profiler records
// with CPU+CUDA, and a name an older Kineto does not know would be refused.
std::string BuildKinetoConfig(const KinetoTraceRequest& request);

// The base config processes read at start through KINETO_CONFIG (it cannot be set over IPC):
// how often Kineto polls profd, which bounds how soon a capture starts (docs/KINETO.md). Written
// world-readable (processes of every user read it) through a temporary file and a rename.
absl::Status WriteKinetoBaseConfig(const std::string& path, absl::Duration poll_interval);

}  // namespace profd::kineto
