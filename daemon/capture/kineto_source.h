// One process of a capture reached through Kineto (docs/KINETO.md): the on-demand config offered
// to the process's next poll of the Kineto socket, then the trace Kineto writes in the process's
// own /tmp, copied (gzip) into the capture folder and removed from the process. The copy is read
// once, streaming, and parsed as it goes (analysis/trace_reader.h with no events kept): a file
// that is not Kineto's trace (NULs, JSON nested past the reader's depth, no object with
// "traceEvents") fails the process's capture with the reader's reason at the first chunk that
// shows it, instead of being copied whole and reported as a trace of 0 events.
//
// Lives on its capture's pipeline thread. The Kineto server calls `notify` from its own thread
// when the config goes out or the offer expires; notify must only queue.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/kineto/kineto_config.h"
#include "daemon/kineto/kineto_ipc_server.h"

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
};

}  // namespace profd
