#include "daemon/trace/trace_writer.h"

#include "daemon/trace/event_limits.h"

namespace profd {

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Create(TraceFormat format,
                                                                 const std::string& path,
                                                                 const TraceProcess& process,
                                                                 int gzip_level,
                                                                 BytesObserver on_bytes) {
  return TraceFormatOf(format).create_writer(path, process, gzip_level, std::move(on_bytes));
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
