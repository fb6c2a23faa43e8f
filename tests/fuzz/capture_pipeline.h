// What profd's capture pipeline does with the event batches of one process, for the fuzz targets:
// the steps of CaptureOrchestrator::WriteBatch (string table, trace writer, the capture's
// streaming analysis, the raw batch record) and of its Finalize (close the trace, finish the
// report that becomes summary.json), and `profctl report` of the trace file just written. The trace
// lives in a memfd, so fuzzing never touches the disk.
//
// Besides not crashing, the pipeline checks what it promises (Check traps, so libFuzzer reports
// the input): the trace it wrote is valid JSON the analysis reads, and no number in the report
// is negative, NaN or infinite.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "analysis/report.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "daemon/trace/string_table.h"
#include "profd/v1/events.pb.h"

namespace profd::fuzz {

// Aborts with the message when cond is false: a broken promise is a finding like a crash.
void Check(bool cond, const char* what);

// The checks of a finished report.
void CheckReport(const analysis::Report& report);

class CapturePipeline {
 public:
  CapturePipeline();
  ~CapturePipeline();

  void Add(const v1::EventBatch& batch);
  // Closes the trace and analyses it as the capture's Finalize does.
  void Finish();

 private:
  int fd_ = -1;
  std::string path_;  // /proc/self/fd/<memfd>
  StringTable names_;
  std::unique_ptr<ChromeTraceWriter> writer_;
  std::unique_ptr<CaptureAnalysis> analysis_;
  size_t process_ = 0;
  std::vector<v1::DeviceInfo> devices_;
  uint64_t dropped_ = 0;
};

}  // namespace profd::fuzz
