#include "daemon/capture/capture_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace profd {

CaptureSession::CaptureSession(v1::CaptureInfo info, std::vector<bool> self_timed,
                               Timeouts timeouts)
    : info_(std::move(info)), self_timed_(std::move(self_timed)), timeouts_(timeouts) {}

bool CaptureSession::Terminal(v1::CapturePhase phase) {
  return phase == v1::CAPTURE_PHASE_DONE || phase == v1::CAPTURE_PHASE_FAILED ||
         phase == v1::CAPTURE_PHASE_CANCELLED;
}

bool CaptureSession::Terminal(v1::CaptureState state) {
  return state == v1::CAPTURE_STATE_FINISHED || state == v1::CAPTURE_STATE_FAILED;
}

absl::Time CaptureSession::start_at() const {
  return absl::FromUnixNanos(std::max(info_.requested_unix_ns(), info_.start_at_unix_ns()));
}

absl::Time CaptureSession::end_at() const {
  return start_at() + absl::Milliseconds(info_.duration_ms());
}

bool CaptureSession::Fail(size_t i, absl::string_view why) {
  v1::ProcessCapture& p = process(i);
  if (Terminal(p.state())) return false;
  p.set_state(v1::CAPTURE_STATE_FAILED);
  p.set_message(std::string(why));
  return true;
}

bool CaptureSession::AgentGone(size_t i) {
  return Fail(i, "the agent disconnected during the capture (process exited or restarted?)");
}

bool CaptureSession::ApplyStatus(size_t i, const v1::CaptureStatus& s,
                                 uint64_t dropped_from_batches) {
  v1::ProcessCapture& p = process(i);
  if (Terminal(p.state())) return false;
  p.set_state(s.state());
  if (s.error() != v1::CAPTURE_ERROR_NONE) p.set_error(s.error());
  if (!s.message().empty()) p.set_message(s.message());
  if (s.enabled_realtime_ns()) {
    p.set_enabled_unix_ns(static_cast<int64_t>(s.enabled_realtime_ns()));
    // From the request (or the start time asked for) to CUPTI enabled in the process.
    int64_t from = std::max(info_.requested_unix_ns(), info_.start_at_unix_ns());
    p.set_start_latency_ns(static_cast<int64_t>(s.enabled_realtime_ns()) - from);
  }
  if (s.disabled_realtime_ns()) {
    p.set_disabled_unix_ns(static_cast<int64_t>(s.disabled_realtime_ns()));
  }
  if (s.recorded_from_realtime_ns()) {
    p.set_recorded_from_unix_ns(static_cast<int64_t>(s.recorded_from_realtime_ns()));
  }
  if (s.state() == v1::CAPTURE_STATE_FINISHED) {
    p.set_dropped_records(std::max<uint64_t>(s.dropped_records(), dropped_from_batches));
    p.set_truncated(p.truncated() || s.truncated());  // profd may have cut it (max_events)
  }
  return true;
}

bool CaptureSession::CheckDeadlines(absl::Time now) {
  bool changed = false;
  for (size_t i = 0; i < processes(); ++i) {
    v1::ProcessCapture& p = process(i);
    if (Terminal(p.state()) || (i < self_timed_.size() && self_timed_[i])) continue;
    if (p.state() == v1::CAPTURE_STATE_UNSPECIFIED && now > start_at() + timeouts_.start) {
      changed |= Fail(i, absl::StrCat("the agent did not enable CUPTI within ",
                                      absl::FormatDuration(timeouts_.start),
                                      " of the start time (process stalled?)"));
    } else if (now > cancelled_at_ + timeouts_.cancel) {
      changed |= Fail(i, absl::StrCat("cancelled, and the agent did not report its end within ",
                                      absl::FormatDuration(timeouts_.cancel),
                                      " (process stalled?); the trace keeps what came"));
    } else if (now > end_at() + timeouts_.finish) {
      changed |=
          Fail(i, absl::StrCat("no end of capture from the agent ",
                               absl::FormatDuration(timeouts_.finish),
                               " after the capture should have ended; the trace is partial"));
    }
  }
  return changed;
}

void CaptureSession::Cancel(absl::Time now) { cancelled_at_ = std::min(cancelled_at_, now); }

void CaptureSession::UpdatePhase(absl::Time now) {
  bool any_started = false;
  for (const v1::ProcessCapture& p : info_.processes()) {
    any_started |= p.state() == v1::CAPTURE_STATE_STARTED;
  }
  if (info_.phase() == v1::CAPTURE_PHASE_PENDING && any_started) {
    info_.set_phase(v1::CAPTURE_PHASE_RUNNING);
    info_.set_started_unix_ns(absl::ToUnixNanos(now));
  }
  if (info_.phase() == v1::CAPTURE_PHASE_RUNNING &&
      now >
          absl::FromUnixNanos(info_.started_unix_ns()) + absl::Milliseconds(info_.duration_ms())) {
    info_.set_phase(v1::CAPTURE_PHASE_FINISHING);
  }
}

bool CaptureSession::AllTerminal() const {
  for (const v1::ProcessCapture& p : info_.processes()) {
    if (!Terminal(p.state())) return false;
  }
  return true;
}

void CaptureSession::Conclude(bool cancelled, absl::string_view write_error, absl::Time now) {
  std::vector<std::string> errors;
  for (const v1::ProcessCapture& p : info_.processes()) {
    if (p.state() == v1::CAPTURE_STATE_FAILED) {
      errors.push_back(absl::StrCat("pid ", p.pid(), ": ", p.message()));
    }
  }
  if (cancelled) {
    info_.set_phase(v1::CAPTURE_PHASE_CANCELLED);
    info_.set_message("cancelled; the events captured until then are kept");
  } else if (errors.size() == processes()) {
    info_.set_phase(v1::CAPTURE_PHASE_FAILED);
    info_.set_message(absl::StrJoin(errors, "; "));
  } else {
    info_.set_phase(v1::CAPTURE_PHASE_DONE);
    if (!errors.empty()) info_.set_message(absl::StrJoin(errors, "; "));
  }
  if (!write_error.empty()) {
    info_.set_phase(v1::CAPTURE_PHASE_FAILED);
    info_.set_message(absl::StrCat("writing the trace failed: ", write_error,
                                   "; nothing of the capture was kept (profd --capture_dir)"));
  }
  info_.set_finished_unix_ns(absl::ToUnixNanos(now));
}

}  // namespace profd
