// Makes a trace file that ChromeTraceWriter never finished (its profd killed mid-capture: the
// gzip stream stops anywhere, the JSON in the middle of an event) readable again: the part of the
// stream that still decompresses, cut after its last whole event and closed with the "profd"
// block (docs/TRACE_FORMAT.md) saying the trace is truncated and why. A trace that was finished
// is left as it is.
//
// Threads: any; it touches only the file it is given.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/trace/trace_writer.h"

namespace profd {

struct TraceRepair {
  bool repaired = false;    // false: the trace was whole, left untouched
  uint64_t events = 0;      // the events the repaired trace keeps (meta events included)
  uint64_t bytes_lost = 0;  // decompressed bytes past the last whole event, dropped
};

// Rewrites path (through a temporary file and a rename) when it is not a whole trace. process
// names the capture and process in the closing block; why goes in its "error".
absl::StatusOr<TraceRepair> RepairTrace(const std::string& path, const TraceProcess& process,
                                        const std::string& why, int gzip_level = 1);

// The same for a Perfetto trace (PerfettoTraceWriter's): the packets that decompress whole are
// kept (TraceRepair::events counts them); nothing is added after them.
absl::StatusOr<TraceRepair> RepairPerfettoTrace(const std::string& path, int gzip_level = 1);

// Whether path is a gzip stream that decompresses to its end (a file someone else wrote whole,
// such as Kineto's trace, which RepairTrace cannot close: it is not the writer's format).
bool GzipIsWhole(const std::string& path);

}  // namespace profd
