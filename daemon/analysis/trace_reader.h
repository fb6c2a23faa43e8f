// Reads Chrome trace-event JSON (our captures, PyTorch profiler / Kineto, HTA-compatible traces)
// into a Trace, plain or gzip, streaming: a SAX parser fed by a decompressing reader thread, so a
// 1 GB trace never exists in memory as a document. "traceEvents" may come anywhere in the top
// object (or the file may be a bare event array); everything not needed is skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/analysis/trace_model.h"

namespace profd::analysis {

// What one Trace may hold, whatever its input says: a small gzip file can inflate to gigabytes
// of JSON, and profd analyses imports in its own memory. The defaults are far above real traces
// (a 1 GB JSON trace has ~4 M events, a model a few thousand distinct names); reading stops
// with RESOURCE_EXHAUSTED past them.
struct ReadLimits {
  uint64_t max_events = 25'000'000;  // GPU activities + CUDA API calls kept: ~1.5 GB
  uint64_t max_name_bytes = 256 << 20;
};

// Adds the events of one file to *trace. Errors name the file, the byte offset and what the
// parser expected.
absl::Status ReadTraceFile(const std::string& path, Trace* trace, const ReadLimits& limits = {});

// The same for a trace already in memory (gzip or plain, detected from the content); label
// names it in errors and in Trace::files.
absl::Status ReadTraceBuffer(std::string_view data, const std::string& label, Trace* trace,
                             const ReadLimits& limits = {});

// All files of one capture (one per process) into one Trace, their clocks aligned through each
// file's baseTimeNanoseconds. The limits hold for all files together.
absl::StatusOr<Trace> ReadTraceFiles(const std::vector<std::string>& paths,
                                     const ReadLimits& limits = {});

}  // namespace profd::analysis
