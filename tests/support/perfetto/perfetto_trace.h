// Reads a Perfetto trace that profd wrote (trace-<pid>.pftrace.gz) with the schema of
// perfetto_subset.proto, and says what a reader would make of it: the slices per track with their
// names resolved through the sequence's interned data, the tracks' descriptions, the counters,
// the flows. Every check a reader makes that the writer could fail is made here and reported in
// `problems` (an unknown field, a name or track used before it was described, an END with no
// BEGIN), so a test asserts that list is empty and then compares the content.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "perfetto/perfetto_subset.pb.h"

namespace profd::testing {

struct PerfettoSlice {
  std::string name;
  uint64_t start = 0;  // ns on CLOCK_REALTIME (the clock snapshot applied)
  uint64_t end = 0;
  std::map<std::string, std::string> args;  // annotation name -> value as text
  // Flows this slice starts or continues (TrackEvent.flow_ids, LegacyEvent.bind_id FLOW_OUT) and
  // ends (terminating_flow_ids, bind_id FLOW_IN), as the ids are written.
  std::vector<uint64_t> flows, terminating_flows;
};

// An arrow a reader draws, from the slice that starts on one track at one time to another;
// trace_processor's rules (flow_tracker): flow_ids begin or step a flow, terminating_flow_ids
// end it at its first arrow; LegacyEvent FLOW_OUT begins one, each FLOW_IN draws from there.
struct PerfettoArrow {
  uint64_t from_track = 0, from_start = 0;
  uint64_t to_track = 0, to_start = 0;
};

struct PerfettoTrack {
  uint64_t uuid = 0;
  uint64_t parent = 0;
  std::string name;  // the track's, the thread's or the process's
  int64_t pid = 0, tid = 0;
  bool is_process = false, is_thread = false, is_counter = false;
  std::string unit;
  std::vector<PerfettoSlice> slices;                        // in start order
  std::vector<PerfettoSlice> instants;                      // start == end
  std::vector<std::pair<uint64_t, double>> counter_values;  // (ns, value)
};

struct PerfettoTraceContents {
  std::vector<std::string> problems;
  size_t packets = 0;
  std::map<uint64_t, PerfettoTrack> tracks;  // by uuid
  // The clock snapshot: the writer's clock value that is `realtime_ns` on CLOCK_REALTIME.
  uint64_t clock_origin = 0, realtime_at_origin = 0;
  uint32_t primary_clock = 0;
  uint32_t sequence_id = 0;  // every packet's trusted_packet_sequence_id
  std::vector<PerfettoArrow> arrows;

  // Tracks by name (first match), or nullptr.
  const PerfettoTrack* Find(const std::string& name) const;
  size_t SliceCount() const;
};

// The decompressed bytes of path as one Trace message; problems say what did not read.
PerfettoTraceContents ReadPerfettoTrace(const std::string& path);
PerfettoTraceContents ReadPerfettoTraceBytes(const std::string& bytes);

}  // namespace profd::testing
