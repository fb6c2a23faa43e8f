// The flight recorder's memory: CUPTI activity buffers as CUPTI filled them (only their valid
// bytes), oldest first, bounded by bytes and by age. Nothing is converted while recording: a
// capture that asks for the seconds before it converts what it takes, so recording costs a copy.
//
// "Covered since" is the time from which every record that began then or later is still held:
// the recording's start, moved to a dropped chunk's completion time whenever one is dropped (a
// chunk completed at T holds only records that began before T).
//
// Not thread-safe: the recorder guards it with its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace profagent {

class RecorderRing {
 public:
  struct Chunk {
    std::string records;         // a CUPTI activity buffer's valid bytes
    uint64_t records_count = 0;  // how many records they hold
    uint64_t completed_ns = 0;   // CLOCK_REALTIME when CUPTI completed the buffer
  };

  // Bounds: the bytes all chunks may hold, and how long a chunk is kept after its completion.
  void Configure(uint64_t max_bytes, uint64_t span_ns);
  // A new recording begins at start_ns: what is held is let go (a capture took it, or the
  // recording paused), as it would leave a gap in the coverage.
  void Restart(uint64_t start_ns);
  // Adds a completed buffer; drops the oldest chunks past the byte bound (a chunk alone larger
  // than the bound is dropped at once).
  void Add(Chunk chunk);
  // Drops the chunks completed before now_ns - span.
  void DropExpired(uint64_t now_ns);
  // The chunks that may hold records that began at or after from_ns, oldest first (shared: the
  // ring may drop them meanwhile).
  std::vector<std::shared_ptr<const Chunk>> Since(uint64_t from_ns) const;

  uint64_t bytes() const { return bytes_; }
  // Records dropped for room or age.
  uint64_t dropped_records() const { return dropped_records_; }
  uint64_t covered_since_ns() const { return covered_since_ns_; }
  size_t chunks() const { return chunks_.size(); }

 private:
  void DropOldest();

  uint64_t max_bytes_ = 0;
  uint64_t span_ns_ = 0;
  std::deque<std::shared_ptr<const Chunk>> chunks_;
  uint64_t bytes_ = 0;
  uint64_t dropped_records_ = 0;
  uint64_t covered_since_ns_ = 0;
};

}  // namespace profagent
