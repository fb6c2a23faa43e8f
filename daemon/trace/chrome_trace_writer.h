// Writes one process's events as Chrome Trace Event JSON, gzip-compressed, in Kineto's
// conventions (docs/TRACE_FORMAT.md) so the Perfetto UI, chrome://tracing and HTA read it.
// Streams: each EventBatch is formatted and compressed as it arrives, so profd never holds a
// whole trace. Owned and called by one capture pipeline thread.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/trace/string_table.h"
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
  int64_t base_time_ns = 0;  // ts/dur are µs relative to this (CLOCK_REALTIME ns)
};

class ChromeTraceWriter {
 public:
  // Creates (truncates) path and writes the header.
  static absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> Create(const std::string& path,
                                                                   const TraceProcess& process,
                                                                   int gzip_level = 1);
  ~ChromeTraceWriter();

  // Formats every event of the batch. names must already hold the batch's StringDefs.
  absl::Status Write(const v1::EventBatch& batch, const StringTable& names);

  // Writes process/thread names, device properties and the capture facts, then closes the file.
  struct Footer {
    uint64_t dropped_records = 0;
    bool truncated = false;
    std::vector<v1::DeviceInfo> devices;
    std::string error;
  };
  absl::Status Finish(const Footer& footer);

  uint64_t events() const { return events_; }
  // Events not written because a timestamp was impossible (event_limits.h).
  uint64_t invalid_events() const { return invalid_events_; }
  uint64_t compressed_bytes() const { return compressed_bytes_; }

 private:
  ChromeTraceWriter(std::string path, FILE* file, const TraceProcess& process, int level);
  absl::Status Flush(bool finish);
  void Separator();
  void AppendTs(uint64_t ns);
  void AppendDur(uint64_t start, uint64_t end);
  void AppendHostEvent(const char* cat, uint64_t start, uint64_t end, uint32_t tid,
                       const std::string& quoted_name);
  void AppendGpuHeader(const char* cat, const std::string& quoted_name, uint32_t device,
                       uint32_t stream, uint64_t start, uint64_t end);
  void AppendFlowEnd(uint32_t correlation, uint32_t device, uint32_t stream, uint64_t ts);

  const std::string path_;
  FILE* file_;
  TraceProcess process_;
  z_stream zs_{};
  std::string buffer_;
  std::string out_;
  absl::Status flush_error_;  // a failed flush between events, returned by Write/Finish
  bool first_event_ = true;
  uint64_t events_ = 0;
  uint64_t invalid_events_ = 0;
  uint64_t compressed_bytes_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> gpu_rows_;  // (device, stream) seen
  std::vector<uint32_t> threads_;                        // host threads seen
};

}  // namespace profd
