// Reads Chrome trace-event JSON (our captures, PyTorch profiler / Kineto, HTA-compatible traces)
// into a Trace, plain or gzip, streaming: a SAX parser fed by a decompressing reader thread, so a
// 1 GB trace never exists in memory as a document. "traceEvents" may come anywhere in the top
// object (or the file may be a bare event array); everything not needed is skipped.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/trace_model.h"

namespace profd::analysis {

// What one Trace may hold, whatever its input says: a small gzip file can inflate to gigabytes
// of JSON, and profd analyses imports in its own memory. The defaults are far above real traces
// (a 1 GB JSON trace has ~4 M events); reading stops with RESOURCE_EXHAUSTED past them. Distinct
// names are bounded by the Trace's NameTable (past its limits they share one name, and the
// report says so); a reader that streams its events to a sink keeps none of them.
struct ReadLimits {
  uint64_t max_events = 25'000'000;  // GPU activities + CUDA API calls kept: ~1.5 GB
  // Refuse a bare event array: what Kineto hands profd must be its own {"traceEvents": [...]}.
  bool require_object = false;
};

// Where a streaming read puts the events as it finds them instead of keeping them in the Trace:
// times on the Trace's clock (the first file's baseTimeNanoseconds), correlation and External
// ids already kept apart per file, names and launch configurations interned in the Trace.
class TraceEventSink {
 public:
  virtual ~TraceEventSink() = default;
  virtual void Add(const GpuActivity& activity) = 0;
  virtual void Add(const HostCall& call) = 0;
  virtual void Add(const CpuOp& op) = 0;
  virtual void Add(const CounterSample& sample) = 0;
};

// Adds the events of one file to *trace. Errors name the file, the byte offset and what the
// parser expected.
absl::Status ReadTraceFile(const std::string& path, Trace* trace, const ReadLimits& limits = {});

// The same, streaming: the events go to *sink as they are read; *tables gets the rest (names,
// launch configurations, devices, the file, the window), in memory bounded by its NameTable.
absl::Status StreamTraceFile(const std::string& path, Trace* tables, TraceEventSink* sink,
                             const ReadLimits& limits = {});

// Up to cap bytes of plain JSON into buf; 0 at the end. Called on a reader thread of the parse
// (and on the caller's for the first chunks), one call at a time.
using ReadChunk = std::function<absl::StatusOr<size_t>(char* buf, size_t cap)>;
// The same from a function: a trace read once, as it is copied (daemon/capture/kineto_source).
absl::Status StreamTrace(const ReadChunk& read, const std::string& label, Trace* tables,
                         TraceEventSink* sink, const ReadLimits& limits = {});

// The same for a trace already in memory (gzip or plain, detected from the content); label
// names it in errors and in Trace::files.
absl::Status ReadTraceBuffer(std::string_view data, const std::string& label, Trace* trace,
                             const ReadLimits& limits = {});

// All files of one capture (one per process) into one Trace, their clocks aligned through each
// file's baseTimeNanoseconds. The limits hold for all files together.
absl::StatusOr<Trace> ReadTraceFiles(const std::vector<std::string>& paths,
                                     const ReadLimits& limits = {});

}  // namespace profd::analysis
