// Bounds on what a capture request may ask for, shared by profctl (which refuses at once, before
// the request is sent) and profd (which refuses whatever a client sends), so both say the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace profd::v1 {

// --delay and --start-at: a capture starts at most this long after the request (a start further
// away is a mistake in a unit more often than a plan, and holds its processes' slot that long).
inline constexpr uint32_t kMaxStartDelayMs = 60 * 60 * 1000;
// --before: how far before the request a capture may begin with what the flight recorder kept
// (it keeps 10 s by default, more when set to).
inline constexpr int64_t kMaxBeforeMs = 5 * 60 * 1000;
// --label: free text kept in the manifest, shown by `captures`, `show` and `list`.
inline constexpr size_t kMaxLabelBytes = 4096;
// The alert kept in the manifest of a capture an alert started (names, labels, annotations, its
// URLs): Prometheus alerts carry a few hundred bytes; this leaves room for long descriptions.
inline constexpr size_t kMaxAlertBytes = 32 * 1024;

}  // namespace profd::v1
