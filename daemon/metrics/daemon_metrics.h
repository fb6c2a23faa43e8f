// profd's own health counters for /metrics: captures, trace bytes, uploads. The components that
// do the work report here; MetricsCollector calls Read() on each scrape.
//
// How to report (any thread; each call takes a short mutex, never blocks on I/O):
//   CaptureOrchestrator:  profd_main.cc hands OnCaptureFinished(const v1::CaptureInfo&) to
//                         CaptureOptions::on_finished, and MetricsCollector reads the running
//                         count from the orchestrator. A component without a CaptureInfo calls
//                         OnCaptureStarted() when a capture is accepted, then exactly one
//                         OnCaptureFinished(result, duration, events, dropped_records,
//                         trace_bytes) when it ends, whatever the outcome. duration is request ->
//                         final state; events and dropped_records sum over the processes;
//                         trace_bytes is what was written to the local spool/store (compressed).
//   Store uploader:       the spool counts its own uploads (store::SpoolStats); profd_main.cc
//                         hands SetUploadSource a function that reads them, called on each
//                         Read(): one count, exported as the spool keeps it.
//   Trace writers that write outside a capture (e.g. profctl import): OnTraceBytesWritten(bytes).
//
// These become profd_captures_total{result}, profd_captures_running,
// profd_capture_duration_seconds, profd_capture_events_total,
// profd_capture_dropped_records_total, profd_trace_written_bytes_total,
// profd_trace_uploaded_bytes_total, profd_uploads_total{result},
// profd_spool_write_failures_total, profd_spool_captures_waiting_for_room and, from the retention
// sweeps
// (SetRetentionSource), profd_retention_kept_bytes{place} and
// profd_retention_pruned_total{place} / _pruned_bytes_total{place} and, from the Alertmanager
// webhook (SetAlertSource), profd_alert_webhook_requests_total{result} and
// profd_alert_decisions_total{decision} (docs/METRICS.md).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "profd/v1/profd.pb.h"

namespace profd {

enum class CaptureResult {
  kSucceeded = 0,  // every process captured and the trace stored (complete or truncated by cap)
  kFailed = 1,     // no trace stored (no agent answered, CUPTI busy in all, write failed...)
  kCancelled = 2,  // CancelCapture or profd shutting down
};
inline constexpr int kCaptureResultCount = 3;
const char* CaptureResultLabel(CaptureResult result);  // "succeeded", "failed", "cancelled"

class DaemonMetrics {
 public:
  // Upper bounds of profd_capture_duration_seconds' buckets (captures last 100 ms to minutes).
  static constexpr std::array<double, 10> kDurationBuckets = {0.1, 0.5, 1,  2.5, 5,
                                                              10,  30,  60, 120, 300};

  struct Snapshot {
    std::array<uint64_t, kCaptureResultCount> captures_by_result{};
    int64_t captures_running = 0;
    std::array<uint64_t, kDurationBuckets.size()> duration_bucket_counts{};  // not cumulative
    uint64_t duration_count = 0;
    double duration_sum_seconds = 0;
    uint64_t events = 0;
    uint64_t dropped_records = 0;
    uint64_t trace_bytes_written = 0;
    uint64_t trace_bytes_uploaded = 0;
    uint64_t uploads_succeeded = 0;
    uint64_t uploads_failed = 0;
    uint64_t spool_write_failures = 0;
    uint64_t spool_waiting_for_room = 0;
    // Retention of --capture_dir and of a local store (daemon/store/retention.h).
    struct Retained {
      bool active = false;
      uint64_t kept_bytes = 0;
      uint64_t pruned = 0;
      uint64_t pruned_bytes = 0;
    };
    Retained capture_dir, store;
    // The Alertmanager webhook (daemon/alerts), while it listens: requests by result and the
    // decisions about the alerts in them, each as {label value, count}.
    struct Alerts {
      bool active = false;
      std::vector<std::pair<std::string, uint64_t>> requests;
      std::vector<std::pair<std::string, uint64_t>> decisions;
    };
    Alerts alerts;
  };

  void OnCaptureStarted();
  void OnCaptureFinished(CaptureResult result, absl::Duration duration, uint64_t events,
                         uint64_t dropped_records, uint64_t trace_bytes);
  // The same from a finished capture's record: result from its phase, duration from request to
  // finish, events and dropped records summed over its processes, bytes over its files.
  void OnCaptureFinished(const v1::CaptureInfo& info);
  struct Uploads {
    uint64_t succeeded = 0;         // captures stored
    uint64_t failed = 0;            // failed attempts (each retry counts)
    uint64_t bytes = 0;             // of the captures stored
    uint64_t write_failures = 0;    // captures the spool could not take, each attempt
    uint64_t waiting_for_room = 0;  // finished captures kept outside the spool, retried
  };
  void SetUploadSource(std::function<Uploads()> source);
  // Retention's own counts, read on each Read() like the uploads: {capture_dir, store}.
  void SetRetentionSource(
      std::function<std::pair<Snapshot::Retained, Snapshot::Retained>()> source);
  void OnTraceBytesWritten(uint64_t bytes);
  // The alert webhook's counts, read on each Read() like the uploads.
  void SetAlertSource(std::function<Snapshot::Alerts()> source);

  Snapshot Read() const;

 private:
  mutable absl::Mutex mutex_;
  Snapshot state_ ABSL_GUARDED_BY(mutex_);
  std::function<Uploads()> uploads_ ABSL_GUARDED_BY(mutex_);
  std::function<std::pair<Snapshot::Retained, Snapshot::Retained>()> retention_
      ABSL_GUARDED_BY(mutex_);
  std::function<Snapshot::Alerts()> alerts_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace profd
