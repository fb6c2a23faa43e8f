// What an event's timestamps from an agent may be: CLOCK_REALTIME ns up to 2^62 (the year 2116).
// Larger values are a corrupt record or a hostile agent (a wrapped subtraction, 2^64 - 1): the
// trace writer and the summary skip such events and count them rather than turn them into a
// trace that spans centuries or a negative duration. A start of 0 is CUPTI's "not measured" (seen
// on the H200: Event Sync records of a loop timed with CUDA events, and kernels in flight when a
// capture began): such events would stretch the window back to 1970, so they count as impossible
// too. An end before its start stays (CUPTI has been seen to report it) and counts as zero length.
#pragma once

#include <cstdint>

namespace profd {

inline constexpr uint64_t kMaxEventTimeNs = uint64_t{1} << 62;

inline bool PlausibleEventTime(uint64_t t) { return t != 0 && t <= kMaxEventTimeNs; }
inline bool PlausibleInterval(uint64_t start, uint64_t end) {
  return PlausibleEventTime(start) && end <= kMaxEventTimeNs;
}

}  // namespace profd
