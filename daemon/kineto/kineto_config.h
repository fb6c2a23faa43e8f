// The on-demand config profd hands Kineto for one capture, and where Kineto will write its trace.
// Keys are Kineto's (libkineto/src/Config.cpp); Kineto only warns about keys it does not know.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace profd::kineto {

struct KinetoTraceRequest {
  std::string capture_id;
  absl::Duration duration;
  absl::Time start_at = absl::InfinitePast();  // InfinitePast: as soon as Kineto can
  bool record_shapes = false;
  bool with_stack = false;
  bool profile_memory = false;
};

// Where Kineto writes the trace, as the process sees it. Kineto accepts on-demand output only
// under /tmp/ unless the process sets KINETO_ONDEMAND_TRACE_DIR, and inserts "_<pid>" (the pid in
// the process's own namespace) before ".json".
std::string KinetoLogFile(const std::string& capture_id);
std::string KinetoTraceFileAsWritten(const std::string& capture_id, int32_t ns_pid);

// How long after the config goes out Kineto starts tracing, unless asked to start later. Kineto's
// profiler loop takes a config on its 1 s ticks and refuses one whose start time has passed by
// then ("start timestamp is in the past"); without a start time it waits two more ticks (warm-up
// + 2 s). The config reaches the loop within a tick of the reply, so a start one tick and a
// margin after the reply is the soonest it always accepts.
inline constexpr absl::Duration kKinetoStartLead = absl::Milliseconds(1100);

// When Kineto starts tracing for a config that went out at `delivered`: the start asked for
// (InfinitePast or the epoch: none), but not sooner than delivered + kKinetoStartLead.
inline absl::Time KinetoStart(absl::Time start_at, absl::Time delivered) {
  return std::max(start_at, delivered + kKinetoStartLead);
}

// KEY=VALUE lines, made when the config goes out (`delivered`): no warm-up (Kineto's default is
// 5 s), the duration, the start time (the one asked for, but not sooner than delivered +
// kKinetoStartLead) and the options asked for. ACTIVITY_TYPES is left to Kineto: its default is
// what torch.profiler records with CPU+CUDA, and a name an older Kineto does not know would be
// refused.
std::string BuildKinetoConfig(const KinetoTraceRequest& request, absl::Time delivered);

// The base config processes read at start through KINETO_CONFIG (it cannot be set over IPC):
// how often Kineto polls profd, which bounds how soon a capture starts (docs/KINETO.md). Written
// world-readable (processes of every user read it) through a temporary file and a rename.
absl::Status WriteKinetoBaseConfig(const std::string& path, absl::Duration poll_interval);

}  // namespace profd::kineto
