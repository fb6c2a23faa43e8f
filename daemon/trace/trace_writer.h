// A capture's trace of one process, in one of two formats: Chrome Trace Event JSON in Kineto's
// conventions (ChromeTraceWriter: what HTA, TensorBoard and chrome://tracing read) or Perfetto's
// protobuf TracePackets (PerfettoTraceWriter: what ui.perfetto.dev and trace_processor read, 2.5x
// smaller and ~4x faster to write, docs/measurements/overhead.md). docs/TRACE_FORMAT.md describes
// both.
//
// This base class is the one pass over a batch both share: each record's times are checked
// (event_limits.h), counted, and handed to the format's encoder; the encoders write into a
// TraceFile, which gzips it into the file ~256 KiB at a time. Owned and called by one capture
// pipeline thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/gpu_counters.h"
#include "daemon/trace/string_table.h"
#include "daemon/trace/trace_file.h"
#include "daemon/trace/trace_format.h"
#include "profd/v1/events.pb.h"

namespace profd {

struct TraceProcess {
  uint32_t pid = 0;
  std::string comm;
  std::string command_line;
  std::string hostname;
  std::string capture_id;
  std::string pod_name;
  std::string pod_namespace;
  int64_t base_time_ns = 0;  // JSON's ts/dur are µs relative to this (CLOCK_REALTIME ns)
  // Its rank in a distributed job (AgentInfo.distributed ...): the trace's distributedInfo, which
  // HTA reads to line ranks up. Left out when the process is not a rank.
  bool distributed = false;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t local_rank = 0;
};

class TraceWriter {
 public:
  using BytesObserver = TraceFile::BytesObserver;

  // Creates (truncates) path and starts a trace of process in the format (its create_writer,
  // trace_format.h). gzip_level: GzipStream's (ISA-L's 0-3); on_bytes sees the compressed bytes
  // as they reach the file.
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Create(TraceFormat format,
                                                             const std::string& path,
                                                             const TraceProcess& process,
                                                             int gzip_level = 1,
                                                             BytesObserver on_bytes = nullptr);
  virtual ~TraceWriter() = default;

  // Writes every event of the batch. names must already hold the batch's StringDefs.
  absl::Status Write(const v1::EventBatch& batch, const StringTable& names);

  // Hardware counter samples of one GPU (profctl capture --gpu-metrics), on the rows of the
  // process's `device` (its CUDA ordinal), each measured counter under GpuCounterTraceName.
  virtual absl::Status WriteCounters(uint32_t device,
                                     std::span<const GpuCounterReading> readings) = 0;

  // Writes the names of the rows, device properties and the capture facts, then closes the file.
  struct Footer {
    uint64_t dropped_records = 0;
    bool truncated = false;
    std::vector<v1::DeviceInfo> devices;
    std::string error;
  };
  virtual absl::Status Finish(const Footer& footer) = 0;

  uint64_t events() const { return events_; }
  // Events not written because a timestamp was impossible (event_limits.h).
  uint64_t invalid_events() const { return invalid_events_; }
  uint64_t compressed_bytes() const { return file_->compressed_bytes(); }

 protected:
  TraceWriter(std::unique_ptr<TraceFile> file, const TraceProcess& process)
      : file_(std::move(file)), process_(process) {}

  // One record each, its times already checked.
  virtual void WriteKernel(const v1::Kernel& k, const StringTable& names) = 0;
  virtual void WriteMemcpy(const v1::Memcpy& m) = 0;
  virtual void WriteMemset(const v1::Memset& m) = 0;
  virtual void WriteApiCall(const v1::ApiCall& a, const StringTable& names) = 0;
  virtual void WriteSync(const v1::Synchronization& s) = 0;
  virtual void WriteMarker(const v1::Marker& m, const StringTable& names) = 0;
  virtual void WriteMemoryOp(const v1::MemoryOp& m) = 0;
  virtual void WriteOverhead(const v1::Overhead& o) = 0;
  // The batch's string definitions, before its events (names already holds them): for a writer
  // that keeps what it wrote of a name by its id.
  virtual void WriteStrings(const v1::EventBatch& batch) {}

  const std::unique_ptr<TraceFile> file_;
  const TraceProcess process_;
  uint64_t events_ = 0;
  uint64_t invalid_events_ = 0;
};

}  // namespace profd
