// Capture ids, for captures and imports alike: <yyyymmdd>T<hhmmss>Z-<host>-<8 hex>, the format
// of docs/TRACE_FORMAT.md. They name capture folders and store keys. And the ids of captures
// across nodes (fleet ids), which each node's capture carries.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace profd {

// A new id for a capture made at `now` on `hostname`. Characters a capture id may not hold
// (anything but letters, digits, '.', '_' and '-') become '-'. Thread-safe.
std::string NewCaptureId(const std::string& hostname, absl::Time now);

// A fleet capture (one command, many nodes) has an id of its own, which every node's capture
// carries: <yyyymmdd>T<hhmmss>Z-fleet-<8 hex>. Its time bounds where the store looks for them.
std::string NewFleetId(absl::Time now);
// Whether id has that form (then its time is *at, when at is given).
bool IsFleetId(const std::string& id, absl::Time* at = nullptr);
// The UTC time an id of either kind starts with; false when it has none.
bool TimeOfId(const std::string& id, absl::Time* out);

}  // namespace profd
