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

// Adds the events of one file to *trace. Errors name the file, the byte offset and what the
// parser expected.
absl::Status ReadTraceFile(const std::string& path, Trace* trace);

// The same for a trace already in memory (gzip or plain, detected from the content); label
// names it in errors and in Trace::files.
absl::Status ReadTraceBuffer(std::string_view data, const std::string& label, Trace* trace);

// All files of one capture (one per process) into one Trace, their clocks aligned through each
// file's baseTimeNanoseconds.
absl::StatusOr<Trace> ReadTraceFiles(const std::vector<std::string>& paths);

}  // namespace profd::analysis
