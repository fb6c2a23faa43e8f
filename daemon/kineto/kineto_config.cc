#include "daemon/kineto/kineto_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace profd::kineto {

std::string KinetoLogFile(const std::string& capture_id) {
  return absl::StrCat("/tmp/profd-", capture_id, ".json");
}

std::string KinetoTraceFileAsWritten(const std::string& capture_id, int32_t ns_pid) {
  return absl::StrCat("/tmp/profd-", capture_id, "_", ns_pid, ".json");
}

std::string BuildKinetoConfig(const KinetoTraceRequest& request, absl::Time delivered) {
  const char* yes_no[] = {"false", "true"};
  std::string out;
  absl::StrAppend(&out, "ACTIVITIES_LOG_FILE=", KinetoLogFile(request.capture_id), "\n");
  absl::StrAppend(&out, "ACTIVITIES_DURATION_MSECS=", absl::ToInt64Milliseconds(request.duration),
                  "\n");
  absl::StrAppend(&out, "ACTIVITIES_WARMUP_PERIOD_SECS=0\n");
  absl::StrAppend(&out, "PROFILE_START_TIME=",
                  absl::ToUnixMillis(KinetoStart(request.start_at, delivered)), "\n");
  absl::StrAppend(&out, "PROFILE_REPORT_INPUT_SHAPES=", yes_no[request.record_shapes], "\n");
  absl::StrAppend(&out, "PROFILE_WITH_STACK=", yes_no[request.with_stack], "\n");
  absl::StrAppend(&out, "PROFILE_PROFILE_MEMORY=", yes_no[request.profile_memory], "\n");
  absl::StrAppend(&out, "REQUEST_TRACE_ID=", request.capture_id, "\n");
  return out;
}

absl::Status WriteKinetoBaseConfig(const std::string& path, absl::Duration poll_interval) {
  // Kineto reads whole seconds; one second is its floor here.
  const int64_t seconds = std::max<int64_t>(1, absl::ToInt64Seconds(poll_interval));
  AtomicWriteOptions options;
  options.mode = 0644;  // every PyTorch process reads it, whichever user it runs as
  return WriteFileAtomically(
      path,
      absl::StrCat("# Written by profd: PyTorch processes read it through KINETO_CONFIG.\n",
                   "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=", seconds, "\n"),
      options);
}

}  // namespace profd::kineto
