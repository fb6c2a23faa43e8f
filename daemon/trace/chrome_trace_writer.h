// Writes one process's events as Chrome Trace Event JSON, gzip-compressed, in Kineto's
// conventions (docs/TRACE_FORMAT.md) so the Perfetto UI, chrome://tracing and HTA read it.
// Streams: each EventBatch is formatted and compressed as it arrives, so profd never holds a
// whole trace. Owned and called by one capture pipeline thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/common/gzip_stream.h"
#include "daemon/metrics/gpu_counters.h"
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
  // Its rank in a distributed job (AgentInfo.distributed ...): the trace's distributedInfo, which
  // HTA reads to line ranks up. Left out when the process is not a rank.
  bool distributed = false;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t local_rank = 0;
};

class ChromeTraceWriter {
 public:
  // Sees each run of compressed bytes once it is in the file, in file order (a capture folder
  // takes the file's SHA-256 from them rather than reading the file back).
  using BytesObserver = std::function<void(std::string_view compressed)>;

  // Creates (truncates) path and writes the header. gzip_level: GzipStream's (ISA-L's 0-3).
  static absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> Create(
      const std::string& path, const TraceProcess& process, int gzip_level = 1,
      BytesObserver on_bytes = nullptr);
  ~ChromeTraceWriter();

  // Formats every event of the batch. names must already hold the batch's StringDefs.
  absl::Status Write(const v1::EventBatch& batch, const StringTable& names);

  // Hardware counter samples of one GPU (profctl capture --gpu-metrics), as counter events on
  // the row of the process's `device` (its CUDA ordinal): one "C" event of cat gpu_counters
  // per sample, each measured counter an arg named GpuCounterTraceName, and the sample's length
  // as "dur" (docs/TRACE_FORMAT.md).
  absl::Status WriteCounters(uint32_t device, std::span<const GpuCounterReading> readings);

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
  ChromeTraceWriter(std::string path, FILE* file, const TraceProcess& process, int level,
                    BytesObserver on_bytes);
  absl::Status Flush(bool finish);
  // The JSON buffer. Events are formatted straight into it: Reserve makes room for the most an
  // event can take, the formatters write through a pointer, Commit sets the new end. No string is
  // built per event.
  char* Reserve(size_t bytes);
  void Commit(char* end) { json_size_ = static_cast<size_t>(end - json_.get()); }
  void Append(std::string_view text);
  // Flushes a full buffer, writes the separator and returns where an event of at most
  // max_bytes goes.
  char* BeginEvent(size_t max_bytes);
  char* PutTs(char* p, uint64_t ns) const;
  char* PutHostEvent(char* p, const char* cat, uint64_t start, uint64_t end, uint32_t tid,
                     std::string_view quoted_name);
  char* PutGpuHeader(char* p, const char* cat, std::string_view quoted_name, uint32_t device,
                     uint32_t stream, uint64_t start, uint64_t end);
  void AppendFlowEnd(uint32_t correlation, uint32_t device, uint32_t stream, uint64_t ts);
  void WriteKernel(const v1::Kernel& k, const StringTable& names);
  template <typename Transfer>
  void WriteTransfer(const Transfer& m, const char* cat, const std::string& name,
                     const std::string& extra);
  void WriteMemcpy(const v1::Memcpy& m);
  void WriteMemset(const v1::Memset& m);
  void WriteApiCall(const v1::ApiCall& a, const StringTable& names);
  void WriteSync(const v1::Synchronization& s);
  void WriteMarker(const v1::Marker& m, const StringTable& names);
  void WriteMemoryOp(const v1::MemoryOp& m);
  void WriteOverhead(const v1::Overhead& o);
  void SawThread(uint32_t tid);
  void SawGpuRow(uint32_t device, uint32_t stream);

  const std::string path_;
  FILE* file_;
  TraceProcess process_;
  BytesObserver on_bytes_;
  GzipStream gzip_;
  std::unique_ptr<char[]> json_;
  size_t json_size_ = 0;
  size_t json_capacity_ = 0;
  absl::Status flush_error_;  // a failed flush between events, returned by Write/Finish
  bool first_event_ = true;
  uint64_t events_ = 0;
  uint64_t invalid_events_ = 0;
  uint64_t compressed_bytes_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> gpu_rows_;  // (device, stream) seen
  std::vector<uint32_t> threads_;                        // host threads seen
  std::vector<uint32_t> counter_devices_;                // GPUs with counter samples
  // The row and thread of the previous event (once there is one): most events share them and
  // skip the searches above.
  std::pair<uint32_t, uint32_t> last_gpu_row_;
  uint32_t last_thread_ = 0;
};

}  // namespace profd
