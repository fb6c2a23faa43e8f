// The bottleneck analysis of one capture, made as its event batches arrive: each batch goes once
// through the trace writer and once through here, and the report (summary.json, the capture's
// summary) is ready when the last batch is in. Nothing is re-read or re-parsed, and the memory it
// takes is the streaming analysis's (analysis/streaming_analysis.h), not the capture's size.
//
// The events are the ones the trace file holds, as `profctl report FILE` reads them back: the
// same names, times relative to the trace's base time, correlation ids kept apart per process.
//
//   CaptureAnalysis analysis(base_time_ns);
//   size_t p = analysis.AddProcess(pid, folder + "/trace-1234.json.gz");
//   analysis.AddBatch(p, batch, names);       // for every batch, after the trace writer
//   analysis::Report report = analysis.Finish();
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analysis/gpu_counters.h"
#include "analysis/report.h"
#include "analysis/streaming_analysis.h"
#include "analysis/trace_model.h"
#include "daemon/trace/string_table.h"
#include "daemon/trace/trace_writer.h"
#include "profd/v1/events.pb.h"

namespace profd {

class CaptureAnalysis {
 public:
  explicit CaptureAnalysis(int64_t base_time_ns, const analysis::AnalysisOptions& options = {},
                           const analysis::StreamLimits& limits = {});

  // A process of the capture and the trace file its events go to; returns its index.
  size_t AddProcess(uint32_t pid, const std::string& trace_path);
  // One batch of the process's events, with the process's strings (already given the batch).
  void AddBatch(size_t process, const v1::EventBatch& batch, const StringTable& names);
  // Hardware counter samples of one GPU, which the process names `device` (its trace's row):
  // as the trace writer wrote them (ChromeTraceWriter::WriteCounters).
  void AddCounters(size_t process, uint32_t device, std::span<const GpuCounterReading> readings);
  // The events the process's batches carried that the report counts (its trace's records).
  uint64_t events(size_t process) const { return tables_.files[process].events; }
  analysis::Report Finish();

 private:
  struct Process {
    uint32_t pid = 0;
    int64_t correlation_offset = 0;
    // Agent string id -> analysis name id.
    absl::flat_hash_map<uint32_t, uint32_t> names;
    int64_t Correlation(uint32_t id) const { return static_cast<int64_t>(id) + correlation_offset; }
  };
  // AddBatch's parts, by kind of record, in the order the analysis needs them.
  void AddDevices(const v1::EventBatch& batch);
  void AddHostCalls(size_t process, const v1::EventBatch& batch, const StringTable& names);
  void AddGpuWork(size_t process, const v1::EventBatch& batch, const StringTable& names);
  void AddHostOps(size_t process, const v1::EventBatch& batch, const StringTable& names);
  uint32_t NameOf(Process& p, uint32_t string_id, const StringTable& names);
  // Times relative to the trace's base. False for a record the trace writer leaves out, and for
  // one a reader of the trace would find impossible (counted as invalid, as it would).
  bool Interval(size_t process, uint64_t start, uint64_t end, bool impossible, int64_t* start_ns,
                int64_t* dur_ns);

  const int64_t base_time_ns_;
  analysis::Trace tables_;  // names, launch configurations, devices, files, window: no events
  analysis::StreamingAnalysis analysis_;
  std::vector<Process> processes_;
};

// The report of trace files already written (a capture repaired when profd starts), each read
// back streaming by its own format's reader (trace_format.h) into one StreamingAnalysis with
// `limits`: the report the capture's own CaptureAnalysis would have made from the events the files
// hold, in the same bounded memory whatever their size.
absl::StatusOr<analysis::Report> AnalyzeWrittenTraces(
    const std::vector<std::pair<std::string, TraceFormat>>& files,
    const analysis::AnalysisOptions& options = {}, const analysis::StreamLimits& limits = {});

// The report of trace files of any format, each known by what it holds (TraceFormatOfFile), as
// `profctl report` and `diff` read them: JSON traces alone (profd's, PyTorch's) as
// analysis::AnalyzeTraceFiles does, in memory, exactly; with another format among them, every
// file streamed by its own reader as AnalyzeWrittenTraces does.
absl::StatusOr<analysis::Report> AnalyzeTraceFilesOfAnyFormat(
    const std::vector<std::string>& paths, const analysis::AnalysisOptions& options = {});

}  // namespace profd
