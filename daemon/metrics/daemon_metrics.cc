#include "daemon/metrics/daemon_metrics.h"

#include <algorithm>
#include <tuple>

#include "common/mutex.h"

namespace profd {

const char* CaptureResultLabel(CaptureResult result) {
  switch (result) {
    case CaptureResult::kSucceeded:
      return "succeeded";
    case CaptureResult::kFailed:
      return "failed";
    case CaptureResult::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

void DaemonMetrics::OnCaptureStarted() {
  MutexLock lock(&mutex_);
  ++state_.captures_running;
}

void DaemonMetrics::OnCaptureFinished(CaptureResult result, absl::Duration duration,
                                      uint64_t events, uint64_t dropped_records,
                                      uint64_t trace_bytes) {
  const double seconds = std::max(0.0, absl::ToDoubleSeconds(duration));
  const size_t bucket =
      std::lower_bound(kDurationBuckets.begin(), kDurationBuckets.end(), seconds) -
      kDurationBuckets.begin();
  MutexLock lock(&mutex_);
  ++state_.captures_by_result[static_cast<int>(result)];
  // A capture finished without a matching start (a caller's bug) must not drive this negative.
  state_.captures_running = std::max<int64_t>(0, state_.captures_running - 1);
  if (bucket < kDurationBuckets.size()) ++state_.duration_bucket_counts[bucket];
  ++state_.duration_count;  // past the last bucket: only +Inf, which is the count
  state_.duration_sum_seconds += seconds;
  state_.events += events;
  state_.dropped_records += dropped_records;
  state_.trace_bytes_written += trace_bytes;
}

void DaemonMetrics::OnCaptureFinished(const v1::CaptureInfo& info) {
  CaptureResult result = CaptureResult::kSucceeded;
  if (info.phase() == v1::CAPTURE_PHASE_FAILED) result = CaptureResult::kFailed;
  if (info.phase() == v1::CAPTURE_PHASE_CANCELLED) result = CaptureResult::kCancelled;
  absl::Duration duration;
  if (info.finished_unix_ns() > info.requested_unix_ns() && info.requested_unix_ns() > 0) {
    duration = absl::Nanoseconds(info.finished_unix_ns() - info.requested_unix_ns());
  }
  uint64_t events = 0;
  uint64_t dropped = 0;
  for (const v1::ProcessCapture& p : info.processes()) {
    events += p.events();
    dropped += p.dropped_records();
  }
  uint64_t bytes = 0;
  for (const v1::TraceFile& f : info.files()) bytes += f.bytes();
  OnCaptureFinished(result, duration, events, dropped, bytes);
}

void DaemonMetrics::SetUploadSource(std::function<Uploads()> source) {
  MutexLock lock(&mutex_);
  uploads_ = std::move(source);
}

void DaemonMetrics::OnTraceBytesWritten(uint64_t bytes) {
  MutexLock lock(&mutex_);
  state_.trace_bytes_written += bytes;
}

void DaemonMetrics::SetRetentionSource(
    std::function<std::pair<Snapshot::Retained, Snapshot::Retained>()> source) {
  MutexLock lock(&mutex_);
  retention_ = std::move(source);
}

void DaemonMetrics::SetAlertSource(std::function<Snapshot::Alerts()> source) {
  MutexLock lock(&mutex_);
  alerts_ = std::move(source);
}

DaemonMetrics::Snapshot DaemonMetrics::Read() const {
  std::function<Uploads()> source;
  std::function<std::pair<Snapshot::Retained, Snapshot::Retained>()> retention;
  std::function<Snapshot::Alerts()> alerts;
  Snapshot snapshot;
  {
    MutexLock lock(&mutex_);
    snapshot = state_;
    source = uploads_;
    retention = retention_;
    alerts = alerts_;
  }
  if (retention) std::tie(snapshot.capture_dir, snapshot.store) = retention();
  if (alerts) snapshot.alerts = alerts();
  if (source) {  // outside our mutex: it takes the spool's
    const Uploads u = source();
    snapshot.uploads_succeeded = u.succeeded;
    snapshot.uploads_failed = u.failed;
    snapshot.trace_bytes_uploaded = u.bytes;
    snapshot.spool_write_failures = u.write_failures;
    snapshot.spool_waiting_for_room = u.waiting_for_room;
  }
  return snapshot;
}

}  // namespace profd
