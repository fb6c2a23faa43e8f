#include "daemon/trace/trace_writer.h"

#include "absl/strings/str_cat.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "daemon/trace/event_limits.h"
#include "daemon/trace/perfetto_trace_writer.h"

namespace profd {

bool ParseTraceFormat(std::string_view text, TraceFormat* format) {
  if (text == "json") {
    *format = TraceFormat::kChromeJson;
  } else if (text == "perfetto") {
    *format = TraceFormat::kPerfetto;
  } else {
    return false;
  }
  return true;
}

std::string TraceFileName(uint32_t pid, TraceFormat format) {
  return absl::StrCat("trace-", pid, format == TraceFormat::kPerfetto ? ".pftrace.gz" : ".json.gz");
}

const char* TraceManifestFormat(TraceFormat format) {
  return format == TraceFormat::kPerfetto ? "perfetto-pb-gz" : "chrome-json-gz";
}

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Create(TraceFormat format,
                                                                 const std::string& path,
                                                                 const TraceProcess& process,
                                                                 int gzip_level,
                                                                 BytesObserver on_bytes) {
  if (format == TraceFormat::kPerfetto) {
    absl::StatusOr<std::unique_ptr<PerfettoTraceWriter>> w =
        PerfettoTraceWriter::Create(path, process, gzip_level, std::move(on_bytes));
    if (!w.ok()) return w.status();
    return std::unique_ptr<TraceWriter>(std::move(*w));
  }
  absl::StatusOr<std::unique_ptr<ChromeTraceWriter>> w =
      ChromeTraceWriter::Create(path, process, gzip_level, std::move(on_bytes));
  if (!w.ok()) return w.status();
  return std::unique_ptr<TraceWriter>(std::move(*w));
}

absl::Status TraceWriter::Write(const v1::EventBatch& batch, const StringTable& names) {
  // An event with an impossible time is counted, not written (event_limits.h).
  auto plausible = [this](bool ok) {
    if (!ok) ++invalid_events_;
    events_ += ok;
    return ok;
  };
  if (batch.strings_size() > 0) WriteStrings(batch);
  for (const v1::Kernel& k : batch.kernels()) {
    if (plausible(PlausibleInterval(k.start_ns(), k.end_ns()))) WriteKernel(k, names);
  }
  for (const v1::Memcpy& m : batch.memcpys()) {
    if (plausible(PlausibleInterval(m.start_ns(), m.end_ns()))) WriteMemcpy(m);
  }
  for (const v1::Memset& m : batch.memsets()) {
    if (plausible(PlausibleInterval(m.start_ns(), m.end_ns()))) WriteMemset(m);
  }
  for (const v1::ApiCall& a : batch.api_calls()) {
    if (plausible(PlausibleInterval(a.start_ns(), a.end_ns()))) WriteApiCall(a, names);
  }
  for (const v1::Synchronization& s : batch.syncs()) {
    if (plausible(PlausibleInterval(s.start_ns(), s.end_ns()))) WriteSync(s);
  }
  for (const v1::Marker& m : batch.markers()) {
    if (plausible(PlausibleInterval(m.start_ns(), m.end_ns()))) WriteMarker(m, names);
  }
  for (const v1::MemoryOp& m : batch.memory_ops()) {
    if (plausible(PlausibleEventTime(m.timestamp_ns()))) WriteMemoryOp(m);
  }
  for (const v1::Overhead& o : batch.overheads()) {
    if (plausible(PlausibleInterval(o.start_ns(), o.end_ns()))) WriteOverhead(o);
  }
  file_->FlushIfFull();
  return file_->status();
}

}  // namespace profd
