// Capture ids, for captures and imports alike: <yyyymmdd>T<hhmmss>Z-<host>-<8 hex>, the format
// of docs/TRACE_FORMAT.md. They name capture folders and store keys.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace profd {

// A new id for a capture made at `now` on `hostname`. Characters a capture id may not hold
// (anything but letters, digits, '.', '_' and '-') become '-'. Thread-safe.
std::string NewCaptureId(const std::string& hostname, absl::Time now);

}  // namespace profd
