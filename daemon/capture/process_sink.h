// Where one process's event batches go during a capture: its string table (bounded by
// max_string_bytes: the agent chooses ids and texts), its trace file (started with the first
// batch), the raw batch record (--record_batches), and the capture's streaming analysis. It
// counts the process's events and the records its batches say were dropped.
//
// Threads: owned and called by one capture's pipeline thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/capture/capture_folder.h"
#include "daemon/trace/capture_analysis.h"
#include "daemon/trace/string_table.h"
#include "daemon/trace/trace_writer.h"
#include "profd/v1/events.pb.h"

namespace profd {

class ProcessSink {
 public:
  struct Options {
    TraceFormat trace_format = TraceFormat::kChromeJson;
    int gzip_level = 1;
    uint64_t max_string_bytes = 12u << 20;  // CaptureOptions::max_string_bytes_per_process
    bool record_batches = false;            // batches-<pid>.pb: varint-delimited EventBatch
  };

  // folder and analysis belong to the capture and outlive the sink.
  ProcessSink(TraceProcess process, std::vector<v1::DeviceInfo> devices, CaptureFolder* folder,
              CaptureAnalysis* analysis, Options options);

  // Charges the batch's strings against max_string_bytes (and adds them to the string table);
  // returns why the batch is refused, or "". Call before Write.
  std::string ChargeStrings(const v1::EventBatch& batch);

  // Drops the events of batch past max_events for this process (0: no limit), in the batch's
  // field order; returns whether it dropped any. Call before Write.
  bool Cut(v1::EventBatch* batch, uint64_t max_events) const;

  // Takes one batch (bytes: as it came, for the raw record). files_ok: no trace of the capture
  // has failed to write so far; once one has, no file is started or recorded to. Returns the
  // error of this process's trace file, if writing it failed.
  absl::Status Write(const v1::EventBatch& batch, absl::string_view bytes, bool files_ok);

  // Hardware counter samples of one GPU (--gpu-metrics): into the trace and the analysis on the
  // rows of the process's devices with that GPU's UUID (its CUDA ordinals differ from profd's
  // under CUDA_VISIBLE_DEVICES); a GPU it does not see is left out. Held until the trace starts,
  // a few seconds' worth.
  absl::Status AddCounters(const GpuCounterBatch& batch);

  // Whether the trace file exists (a batch came and the file could be created).
  bool has_trace() const { return writer_ != nullptr; }
  const std::string& file_name() const { return file_name_; }
  // Writes the footer and closes the trace file.
  absl::Status FinishTrace(uint64_t dropped_records, bool truncated, const std::string& error);

  uint64_t events() const { return events_; }
  uint64_t dropped_records() const { return dropped_records_; }  // saturating: the agent says

 private:
  absl::Status StartTrace();
  void Record(absl::string_view bytes) const;

  const TraceProcess process_;
  CaptureFolder* const folder_;
  CaptureAnalysis* const analysis_;
  const Options options_;
  std::vector<v1::DeviceInfo> devices_;  // from the target, then from the batches
  StringTable names_;
  const v1::EventBatch* charged_ = nullptr;  // the batch whose strings ChargeStrings added
  // What names_ holds, against max_string_bytes: a slot per id up to the largest, and the text
  // of each string.
  uint64_t string_bytes_ = 0;
  uint32_t string_slots_ = 0;
  std::string file_name_;
  std::unique_ptr<TraceWriter> writer_;
  std::vector<GpuCounterBatch> pending_counters_;  // before the first batch
  size_t pending_readings_ = 0;
  size_t analysis_index_ = 0;  // in analysis_, once the trace file was started
  uint64_t events_ = 0;
  uint64_t dropped_records_ = 0;
};

}  // namespace profd
