// The state of one capture: its phase (PENDING -> RUNNING -> FINISHING -> DONE, FAILED or
// CANCELLED) and each process's state, moved on by what the agents report and by the clock:
// the agent must enable CUPTI within the start timeout of the start time, and report the end
// within the finish timeout of the end. No I/O and no clock of its own: every call that depends
// on the time is given it, so the timeouts are tested without sleeping.
//
// Threads: owned and called by one capture's pipeline thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "profd/v1/profd.pb.h"

namespace profd {

class CaptureSession {
 public:
  struct Timeouts {
    absl::Duration start = absl::Seconds(5);    // CUPTI enabled by the start time + this
    absl::Duration finish = absl::Seconds(30);  // the end reported by the end time + this
    absl::Duration cancel = absl::Seconds(5);   // ... or by a cancel + this, whichever is first
  };

  // info: the capture as requested (PENDING), with one ProcessCapture per target.
  // self_timed[i]: process i keeps deadlines of its own (Kineto) that the caller enforces.
  CaptureSession(v1::CaptureInfo info, std::vector<bool> self_timed, Timeouts timeouts);

  static bool Terminal(v1::CapturePhase phase);
  static bool Terminal(v1::CaptureState state);

  // The capture's record: what GetCapture shows once published.
  const v1::CaptureInfo& info() const { return info_; }
  v1::CaptureInfo& mutable_info() { return info_; }
  size_t processes() const { return static_cast<size_t>(info_.processes_size()); }
  v1::ProcessCapture& process(size_t i) { return *info_.mutable_processes(static_cast<int>(i)); }
  const Timeouts& timeouts() const { return timeouts_; }

  // When CUPTI should be on (the request or the start time asked for, whichever is later), and
  // when the window ends.
  absl::Time start_at() const;
  absl::Time end_at() const;

  // Each returns whether the capture changed. A process in a terminal state stays there.
  // Gives up on process i with `why` as its message.
  bool Fail(size_t i, absl::string_view why);
  bool AgentGone(size_t i);
  // The agent's report; dropped_from_batches: what its batches said they dropped.
  bool ApplyStatus(size_t i, const v1::CaptureStatus& status, uint64_t dropped_from_batches);
  // Fails the processes whose agent missed the start, the finish or the cancel timeout.
  bool CheckDeadlines(absl::Time now);
  // The capture was cancelled at `now` (the first cancel counts): its agents have the cancel
  // timeout to report their end, however long the capture was meant to run.
  void Cancel(absl::Time now);
  bool cancelled() const { return cancelled_at_ != absl::InfiniteFuture(); }
  // PENDING -> RUNNING once a process started; RUNNING -> FINISHING once the window is over.
  void UpdatePhase(absl::Time now);
  bool AllTerminal() const;

  // The end: DONE, FAILED (every process failed, or writing failed) or CANCELLED, with the
  // message that says why.
  void Conclude(bool cancelled, absl::string_view write_error, absl::Time now);

 private:
  v1::CaptureInfo info_;
  const std::vector<bool> self_timed_;
  const Timeouts timeouts_;
  absl::Time cancelled_at_ = absl::InfiniteFuture();
};

}  // namespace profd
