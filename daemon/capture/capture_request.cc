#include "daemon/capture/capture_request.h"

#include "absl/strings/str_cat.h"
#include "common/capture_id.h"
#include "daemon/trace/trace_format.h"
#include "profd/v1/capture_limits.h"

namespace profd {

absl::Status CheckCaptureRequest(const v1::CaptureRequest& request, absl::Time now) {
  if (request.duration_ms() <= 0) {
    return absl::InvalidArgumentError("the capture duration must be more than 0 (e.g. 5s)");
  }
  // A delay and a start time have the same bound (profd/v1/capture_limits.h).
  const absl::Duration max_delay = absl::Milliseconds(v1::kMaxStartDelayMs);
  if (request.delay_ms() < 0) {
    return absl::InvalidArgumentError("the capture delay must not be negative");
  }
  if (absl::Milliseconds(request.delay_ms()) > max_delay) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delay ", absl::FormatDuration(absl::Milliseconds(request.delay_ms())),
                     " is over the limit of ", absl::FormatDuration(max_delay),
                     " (as --start-at): start the capture closer to when it is wanted"));
  }
  if (request.start_at_unix_ns() != 0) {
    const absl::Time start_at = absl::FromUnixNanos(request.start_at_unix_ns());
    if (start_at < now - absl::Seconds(1) || start_at > now + max_delay) {
      return absl::InvalidArgumentError(
          "--start-at must be within the next hour (a wall-clock time all nodes share)");
    }
  }
  // The flight recorder keeps 10 s by default; an agent set to keep more can give more.
  const absl::Duration max_before = absl::Milliseconds(v1::kMaxBeforeMs);
  if (request.before_ms() < 0 || absl::Milliseconds(request.before_ms()) > max_before) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--before ", absl::FormatDuration(absl::Milliseconds(request.before_ms())),
        " is outside 0..", absl::FormatDuration(max_before), " (what a flight recorder may keep)"));
  }
  if (request.label().size() > v1::kMaxLabelBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--label is ", request.label().size(), " bytes; a label may have at most ",
                     v1::kMaxLabelBytes, " (it is a name, not data)"));
  }
  if (request.reason().size() > v1::kMaxLabelBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--reason is ", request.reason().size(),
                                                   " bytes; a reason may have at most ",
                                                   v1::kMaxLabelBytes));
  }
  // A node runs a few pods of a workload; a request naming more is no fleet capture's.
  constexpr int kMaxPods = 1024;
  if (request.pods_size() > kMaxPods) {
    return absl::InvalidArgumentError(absl::StrCat("the request names ", request.pods_size(),
                                                   " pods; one node's capture takes at most ",
                                                   kMaxPods));
  }
  // The fleet id goes into the manifest and the store's index as a capture id does.
  if (!request.fleet_id().empty() && !IsFleetId(request.fleet_id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fleet id '", request.fleet_id(),
        "' is not one: expected <yyyymmdd>T<hhmmss>Z-fleet-<hex>, as profctl makes them"));
  }
  if (request.has_alert() && request.alert().ByteSizeLong() > v1::kMaxAlertBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the alert is ", request.alert().ByteSizeLong(),
                                                   " bytes; a capture keeps at most ",
                                                   v1::kMaxAlertBytes));
  }
  if (!request.trace_format().empty() && TraceFormatNamed(request.trace_format()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--format ", request.trace_format(),
                                                   " is not a trace format: give ",
                                                   TraceFormatChoices()));
  }
  if (request.gpu_metrics() && request.gpu_metrics_interval_ns() != 0) {
    const absl::Duration interval = absl::Nanoseconds(request.gpu_metrics_interval_ns());
    if (interval < absl::Microseconds(20) || interval > absl::Seconds(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpu-metrics-interval ", absl::FormatDuration(interval), " is outside 20us..1s"));
    }
  }
  return absl::OkStatus();
}

}  // namespace profd
