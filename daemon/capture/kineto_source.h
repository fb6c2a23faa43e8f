// One process of a capture reached through Kineto (docs/KINETO.md): the on-demand config offered
// to the process's next poll of the Kineto socket, then the trace Kineto writes in the process's
// own /tmp, copied (gzip) into the capture folder and removed from the process. The copy is read
// once, streaming, and parsed as it goes (analysis/trace_reader.h with no events kept): a file
// that is not Kineto's trace (NULs, JSON nested past the reader's depth, no object with
// "traceEvents") fails the process's capture with the reader's reason at the first chunk that
// shows it, instead of being copied whole and reported as a trace of 0 events.
//
// It also keeps the process's row of the capture (v1::ProcessCapture) through that path: STARTED
// when the config went out, FINISHED once the trace is copied, FAILED with the reason when the
// offer expired or no trace came by its deadline. The capture's pipeline knows nothing else of
// Kineto.
//
// Lives on its capture's pipeline thread. The Kineto server calls `notify` from its own thread
// when the config goes out or the offer expires; notify must only queue.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "analysis/report.h"
#include "daemon/kineto/kineto_config.h"
#include "daemon/kineto/kineto_ipc_server.h"
#include "profd/v1/profd.pb.h"

namespace profd {

class KinetoSource {
 public:
  struct Event {
    enum Kind { kDelivered, kExpired } kind;
    absl::Time at;
    int32_t pid_in_namespace = 0;
  };

  KinetoSource(kineto::KinetoIpcServer* server, uint32_t pid, uid_t uid, std::string folder,
               uint64_t max_trace_bytes, int gzip_level);
  ~KinetoSource();  // withdraws an offer that has not gone out

  absl::Status Offer(const kineto::KinetoTraceRequest& request, absl::Time expires,
                     std::function<void(Event)> notify);

  // The config of a capture for this path: its window and the request's options. The offer
  // waits for the process's next poll, at most two poll periods (of at least 5 s) after the
  // start, plus start_timeout.
  static kineto::KinetoTraceRequest ConfigFor(const v1::CaptureInfo& capture,
                                              const v1::CaptureRequest& request);
  static absl::Time OfferExpiry(const v1::CaptureInfo& capture, absl::Duration poll_period,
                                absl::Duration start_timeout, absl::Time now);

  // The process's row after an Event: STARTED at Kineto's start time for a delivery (the trace
  // then due by the window's end + finish_timeout), FAILED saying why for an expiry. False when
  // the row had already ended.
  bool Apply(const Event& event, const v1::CaptureInfo& capture, absl::Duration finish_timeout,
             v1::ProcessCapture* p);
  // Each pipeline turn, for a STARTED row: the trace copied (FINISHED), refused, or not written
  // by its deadline (FAILED, saying why). True when the row changed.
  bool Collect(absl::Time now, int64_t duration_ms, absl::Duration finish_timeout,
               v1::ProcessCapture* p);
  // The report of a capture with Kineto's traces among its files (paths: all of them; events:
  // what the Kineto traces hold): in memory, exactly, up to max_exact_events; past it streaming,
  // in bounded memory, and the report says the operator table then has no CUDA time.
  static absl::StatusOr<analysis::Report> Analyze(const std::vector<std::string>& paths,
                                                  uint64_t events, uint64_t max_exact_events);

  // FINISHED through Collect: the copy in the folder, named file_name().
  bool collected() const { return collected_; }
  // The config went out (from the Event): the trace will be named after this pid.
  void Delivered(int32_t pid_in_namespace) { pid_in_namespace_ = pid_in_namespace; }
  bool delivered() const { return pid_in_namespace_ != 0; }
  void Withdraw();

  // After delivery: NotFound while Kineto has not written the trace yet; OK once it is copied to
  // <folder>/<file_name()> and removed from the process; another error if it is refused.
  absl::Status TryCollect();
  const std::string& file_name() const { return file_name_; }
  uint64_t trace_bytes() const { return trace_bytes_; }
  // The trace events the collected file holds (every kind, metadata included), as read.
  uint64_t trace_events() const { return trace_events_; }

 private:
  kineto::KinetoIpcServer* const server_;
  const uint32_t pid_;
  const uid_t uid_;
  const std::string folder_;
  const uint64_t max_trace_bytes_;
  const int gzip_level_;
  std::string capture_id_;
  std::string file_name_;
  int32_t pid_in_namespace_ = 0;
  bool offered_ = false;
  uint64_t trace_bytes_ = 0;
  uint64_t trace_events_ = 0;
  absl::Time deadline_ = absl::InfiniteFuture();  // the trace's, once delivered
  bool collected_ = false;
};

}  // namespace profd
