// The entry points of the bottleneck analysis, for profd's capture pipeline (summary.json of
// every capture) and for `profctl report` / `profctl diff`. No gRPC here: both sides link it.
//
//   absl::StatusOr<Report> r = AnalyzeTraceFiles({"trace-1234.json.gz"});
//   if (r.ok()) WriteReportJson(*r, capture_dir + "/summary.json");
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/report.h"
#include "analysis/streaming_analysis.h"
#include "analysis/trace_model.h"
#include "analysis/trace_reader.h"

namespace profd::analysis {

// Computes the report of a trace already in memory. Pure: any thread, no I/O.
Report Analyze(const Trace& trace, const AnalysisOptions& options = {});

// Reads (streaming, gzip or plain) and analyzes the trace files of one capture together.
absl::StatusOr<Report> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                         const AnalysisOptions& options = {});

// Reads and analyses the trace files of one capture streaming (StreamTraceFile into a
// StreamingAnalysis with `limits`): memory bounded by the limits and the distinct-name caps,
// whatever the files' size, nothing kept per event. For profd's own traces the same report as
// AnalyzeTraceFiles; traces with CPU operators (PyTorch's) get an operator table without CUDA
// time, which only the in-memory analysis can attribute.
absl::StatusOr<Report> AnalyzeTraceFilesStreaming(const std::vector<std::string>& paths,
                                                  const AnalysisOptions& options = {},
                                                  const StreamLimits& limits = {});

// The same for traces in any format: read(tables, sink) reads each file, streaming, into them
// (StreamTraceFile for JSON; daemon/trace/perfetto_trace_reader.h for Perfetto).
absl::StatusOr<Report> AnalyzeStream(
    const std::function<absl::Status(Trace* tables, TraceEventSink* sink)>& read,
    const AnalysisOptions& options = {}, const StreamLimits& limits = {});

// The report as JSON (stable field names, times in ns; docs/ANALYSIS.md).
std::string ReportToJson(const Report& report, bool pretty = true);
// Findings alone, as the report's "findings" array (compact).
std::string FindingsToJson(const std::vector<Finding>& findings);

// Writes ReportToJson to path (e.g. <capture>/summary.json), through a temporary file and a
// rename so a reader never sees half a file.
absl::Status WriteReportJson(const Report& report, const std::string& path);

}  // namespace profd::analysis
