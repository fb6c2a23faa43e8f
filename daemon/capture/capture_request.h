// The one check of a capture request's own fields (what, for how long, when, how it is written),
// made by profctl before it sends a request, so that a mistake is said at once, and by profd on
// whatever any client sends, so that both say the same words. What depends on the daemon (its
// --max_capture_duration, its disk, its processes) profd checks after this.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "profd/v1/profd.pb.h"

namespace profd {

// INVALID_ARGUMENT naming the flag (--duration, --delay, --start-at, --label, --format,
// --gpu-metrics-interval) and the bound it broke. now: the wall clock --start-at is checked
// against.
absl::Status CheckCaptureRequest(const v1::CaptureRequest& request, absl::Time now);

}  // namespace profd
