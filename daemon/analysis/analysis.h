// The entry points of the bottleneck analysis, for profd's capture pipeline (summary.json of
// every capture) and for `profctl report` / `profctl diff`. No gRPC here: both sides link it.
//
//   absl::StatusOr<Report> r = AnalyzeTraceFiles({"trace-1234.json.gz"});
//   if (r.ok()) WriteReportJson(*r, capture_dir + "/summary.json");
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/analysis/report.h"
#include "daemon/analysis/trace_model.h"

namespace profd::analysis {

// Computes the report of a trace already in memory. Pure: any thread, no I/O.
Report Analyze(const Trace& trace, const AnalysisOptions& options = {});

// Reads (streaming, gzip or plain) and analyzes the trace files of one capture together.
absl::StatusOr<Report> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                         const AnalysisOptions& options = {});

// The report as JSON (stable field names, times in ns; docs/ANALYSIS.md).
std::string ReportToJson(const Report& report, bool pretty = true);

// Writes ReportToJson to path (e.g. <capture>/summary.json), through a temporary file and a
// rename so a reader never sees half a file.
absl::Status WriteReportJson(const Report& report, const std::string& path);

}  // namespace profd::analysis
