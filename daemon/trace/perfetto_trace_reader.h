// Reads back a trace PerfettoTraceWriter wrote (whole, or cut at its last whole packet by
// RepairPerfettoTrace) into the analysis's events, the same ones CaptureAnalysis made from the
// batches the trace was written from: the writer's other half, so that a Perfetto capture's
// report can be made again from its file alone (a capture repaired after its profd was killed,
// CaptureOrchestrator::RecoverFolder). It reads what the writer writes (and wrote before: flow ids
// where it now binds arrows with LegacyEvent.bind_id): one packet sequence, its
// interned names, tracks described before their events, a slice's BEGIN followed by its END.
//
// Streaming (the events go to a sink as they are decoded), in memory bounded by the writer's own
// caps on interned entries and by the Trace's NameTable. Threads: any.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "analysis/trace_model.h"
#include "analysis/trace_reader.h"

namespace profd {

// Adds the file to tables->files and its events to *sink (times on tables' clock: the first
// file's base time; correlation ids kept apart per file, as the JSON reader does). Counter
// samples (--gpu-metrics) are not read back: the trace keeps their start only. Errors name the
// file and what was not profd's Perfetto trace.
absl::Status StreamPerfettoTrace(const std::string& path, analysis::Trace* tables,
                                 analysis::TraceEventSink* sink);

// Whether path holds a Perfetto trace rather than JSON: by its name (.pftrace, .pftrace.gz,
// .perfetto-trace), else by its first bytes once decompressed (a Trace starts with its first
// packet's tag, 0x0a, then binary; a JSON trace is text, which may start with a newline too). A
// copy renamed by hand is still read with the right reader.
bool IsPerfettoTraceFile(const std::string& path);

}  // namespace profd
