// Writes one process's events as Chrome Trace Event JSON, gzip-compressed, in Kineto's
// conventions (docs/TRACE_FORMAT.md) so the Perfetto UI, chrome://tracing and HTA read it.
// Streams: each EventBatch is formatted and compressed as it arrives, so profd never holds a
// whole trace. Owned and called by one capture pipeline thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/trace/trace_writer.h"

namespace profd {

class ChromeTraceWriter : public TraceWriter {
 public:
  // Creates (truncates) path and writes the header. gzip_level: GzipStream's (ISA-L's 0-3).
  static absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> Create(
      const std::string& path, const TraceProcess& process, int gzip_level = 1,
      BytesObserver on_bytes = nullptr);

  // One "C" event of cat gpu_counters per sample, each measured counter an arg named
  // GpuCounterTraceName, and the sample's length as "dur" (docs/TRACE_FORMAT.md).
  absl::Status WriteCounters(uint32_t device, std::span<const GpuCounterReading> readings) override;
  // Process and thread names as "M" events, then deviceProperties and the "profd" object.
  absl::Status Finish(const Footer& footer) override;

 private:
  ChromeTraceWriter(std::unique_ptr<TraceFile> file, const TraceProcess& process)
      : TraceWriter(std::move(file), process) {}
  // Flushes a full buffer, writes the separator and returns where an event of at most
  // max_bytes goes. Events are formatted straight into the file's buffer through a pointer: no
  // string is built per event.
  char* BeginEvent(size_t max_bytes);
  char* PutTs(char* p, uint64_t ns) const;
  char* PutHostEvent(char* p, const char* cat, uint64_t start, uint64_t end, uint32_t tid,
                     std::string_view quoted_name);
  char* PutGpuHeader(char* p, const char* cat, std::string_view quoted_name, uint32_t device,
                     uint32_t stream, uint64_t start, uint64_t end);
  void AppendFlowEnd(uint32_t correlation, uint32_t device, uint32_t stream, uint64_t ts);
  void WriteKernel(const v1::Kernel& k, const StringTable& names) override;
  template <typename Transfer>
  void WriteTransfer(const Transfer& m, const char* cat, const std::string& name,
                     const std::string& extra);
  void WriteMemcpy(const v1::Memcpy& m) override;
  void WriteMemset(const v1::Memset& m) override;
  void WriteApiCall(const v1::ApiCall& a, const StringTable& names) override;
  void WriteSync(const v1::Synchronization& s) override;
  void WriteMarker(const v1::Marker& m, const StringTable& names) override;
  void WriteMemoryOp(const v1::MemoryOp& m) override;
  void WriteOverhead(const v1::Overhead& o) override;
  void SawThread(uint32_t tid);
  void SawGpuRow(uint32_t device, uint32_t stream);

  bool first_event_ = true;
  std::vector<std::pair<uint32_t, uint32_t>> gpu_rows_;  // (device, stream) seen
  std::vector<uint32_t> threads_;                        // host threads seen
  std::vector<uint32_t> counter_devices_;                // GPUs with counter samples
  // The row and thread of the previous event (once there is one): most events share them and
  // skip the searches above.
  std::pair<uint32_t, uint32_t> last_gpu_row_;
  uint32_t last_thread_ = 0;
};

}  // namespace profd
