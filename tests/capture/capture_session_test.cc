// The capture state machine with the clock in the test's hands: every timeout is crossed by
// passing a later time, not by sleeping.
#include "daemon/capture/capture_session.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace profd {
namespace {

const absl::Time kRequested = absl::FromUnixSeconds(1'800'000'000);
constexpr absl::Duration kWindow = absl::Seconds(10);
const CaptureSession::Timeouts kTimeouts{absl::Seconds(5), absl::Seconds(30)};

// A capture of `n` processes requested at kRequested for kWindow, starting at once.
CaptureSession Session(int n, std::vector<bool> self_timed = {},
                       absl::Duration delay = absl::ZeroDuration()) {
  v1::CaptureInfo info;
  info.set_capture_id("20270115T080000Z-node-00000001");
  info.set_phase(v1::CAPTURE_PHASE_PENDING);
  info.set_requested_unix_ns(absl::ToUnixNanos(kRequested));
  info.set_start_at_unix_ns(absl::ToUnixNanos(kRequested + delay));
  info.set_duration_ms(absl::ToInt64Milliseconds(kWindow));
  for (int i = 0; i < n; ++i) info.add_processes()->set_pid(100 + i);
  return CaptureSession(std::move(info), std::move(self_timed), kTimeouts);
}

v1::CaptureStatus Status(v1::CaptureState state) {
  v1::CaptureStatus s;
  s.set_state(state);
  return s;
}

TEST(CaptureSessionTest, AgentThatNeverEnablesCuptiFailsAtTheStartTimeout) {
  CaptureSession session = Session(1);
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Seconds(5)));
  EXPECT_FALSE(session.AllTerminal());
  EXPECT_TRUE(session.CheckDeadlines(kRequested + absl::Seconds(5) + absl::Milliseconds(1)));
  EXPECT_EQ(session.info().processes(0).state(), v1::CAPTURE_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(session.info().processes(0).message(),
                                "did not enable CUPTI within 5s of the start time"));
  EXPECT_TRUE(session.AllTerminal());
}

// A cancel bounds the wait for the agent's end by the cancel timeout, whatever the window left
// (issue 13: a stalled agent kept a cancelled capture "finishing" and its pid locked).
TEST(CaptureSessionTest, CancelledCaptureEndsAtTheCancelTimeoutEvenWithTheWindowLeft) {
  CaptureSession session = Session(1);
  ASSERT_TRUE(session.ApplyStatus(0, Status(v1::CAPTURE_STATE_STARTED), 0));
  const absl::Time cancel = kRequested + absl::Seconds(1);
  session.Cancel(cancel);
  session.Cancel(cancel + absl::Seconds(3));  // a second cancel does not move the deadline
  EXPECT_TRUE(session.cancelled());
  EXPECT_FALSE(session.CheckDeadlines(cancel + absl::Seconds(5)));
  EXPECT_TRUE(session.CheckDeadlines(cancel + absl::Seconds(5) + absl::Milliseconds(1)));
  EXPECT_EQ(session.info().processes(0).state(), v1::CAPTURE_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(session.info().processes(0).message(),
                                "cancelled, and the agent did not report its end within 5s"));
  EXPECT_TRUE(session.AllTerminal());
}

// Cancelled before its delayed start: not kept until the start timeout of a start an hour away.
TEST(CaptureSessionTest, CancelBeforeADelayedStartEndsAtTheCancelTimeout) {
  CaptureSession session = Session(1, {}, absl::Hours(1));
  session.Cancel(kRequested);
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Seconds(5)));
  EXPECT_TRUE(session.CheckDeadlines(kRequested + absl::Seconds(6)));
  EXPECT_TRUE(session.AllTerminal());
}

// Kineto keeps its own deadlines (the orchestrator's): a cancel does not fail it here.
TEST(CaptureSessionTest, CancelLeavesSelfTimedProcessesToTheirOwnDeadlines) {
  CaptureSession session = Session(1, {true});
  session.Cancel(kRequested);
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Minutes(10)));
}

TEST(CaptureSessionTest, StartTimeoutCountsFromTheStartTimeAskedFor) {
  CaptureSession session = Session(1, {}, absl::Seconds(60));
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Seconds(64)));
  EXPECT_TRUE(session.CheckDeadlines(kRequested + absl::Seconds(66)));
}

TEST(CaptureSessionTest, AgentThatNeverReportsTheEndFailsAtTheFinishTimeout) {
  CaptureSession session = Session(1);
  ASSERT_TRUE(session.ApplyStatus(0, Status(v1::CAPTURE_STATE_STARTED), 0));
  // The window ends at +10 s; the agent has 30 s more.
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Seconds(40)));
  EXPECT_TRUE(session.CheckDeadlines(kRequested + absl::Seconds(41)));
  EXPECT_TRUE(absl::StrContains(session.info().processes(0).message(),
                                "no end of capture from the agent 30s after"));
  EXPECT_FALSE(session.CheckDeadlines(kRequested + absl::Seconds(50)));  // failed once
}

TEST(CaptureSessionTest, SelfTimedProcessesAreLeftToTheirOwnDeadlines) {
  CaptureSession session = Session(2, {true, false});
  EXPECT_TRUE(session.CheckDeadlines(kRequested + absl::Hours(1)));
  EXPECT_EQ(session.info().processes(0).state(), v1::CAPTURE_STATE_UNSPECIFIED);
  EXPECT_EQ(session.info().processes(1).state(), v1::CAPTURE_STATE_FAILED);
  EXPECT_FALSE(session.AllTerminal());
}

TEST(CaptureSessionTest, PhaseFollowsTheProcessesAndTheWindow) {
  CaptureSession session = Session(2);
  session.UpdatePhase(kRequested + absl::Seconds(1));
  EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_PENDING);

  session.ApplyStatus(1, Status(v1::CAPTURE_STATE_STARTED), 0);
  const absl::Time started = kRequested + absl::Seconds(2);
  session.UpdatePhase(started);
  EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_RUNNING);
  EXPECT_EQ(session.info().started_unix_ns(), absl::ToUnixNanos(started));

  session.UpdatePhase(started + kWindow);
  EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_RUNNING);
  session.UpdatePhase(started + kWindow + absl::Milliseconds(1));
  EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_FINISHING);
}

TEST(CaptureSessionTest, TerminalProcessesIgnoreLateReports) {
  CaptureSession session = Session(1);
  v1::CaptureStatus finished = Status(v1::CAPTURE_STATE_FINISHED);
  finished.set_dropped_records(3);
  ASSERT_TRUE(session.ApplyStatus(0, finished, 7));
  EXPECT_EQ(session.info().processes(0).dropped_records(), 7u);  // the larger count
  EXPECT_FALSE(session.ApplyStatus(0, Status(v1::CAPTURE_STATE_STARTED), 0));
  EXPECT_FALSE(session.AgentGone(0));
  EXPECT_FALSE(session.Fail(0, "late"));
  EXPECT_EQ(session.info().processes(0).state(), v1::CAPTURE_STATE_FINISHED);
}

TEST(CaptureSessionTest, ConcludeSaysWhyTheCaptureEnded) {
  const absl::Time end = kRequested + absl::Seconds(20);
  {
    CaptureSession session = Session(2);
    session.ApplyStatus(0, Status(v1::CAPTURE_STATE_FINISHED), 0);
    session.AgentGone(1);
    session.Conclude(false, "", end);
    EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_DONE);
    EXPECT_TRUE(absl::StrContains(session.info().message(), "pid 101: the agent disconnected"));
    EXPECT_EQ(session.info().finished_unix_ns(), absl::ToUnixNanos(end));
  }
  {
    CaptureSession session = Session(1);
    session.Fail(0, "bad batch");
    session.Conclude(false, "", end);
    EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_FAILED);
    EXPECT_EQ(session.info().message(), "pid 100: bad batch");
  }
  {
    CaptureSession session = Session(1);
    session.ApplyStatus(0, Status(v1::CAPTURE_STATE_FINISHED), 0);
    session.Conclude(true, "", end);
    EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_CANCELLED);
  }
  {
    CaptureSession session = Session(1);
    session.ApplyStatus(0, Status(v1::CAPTURE_STATE_FINISHED), 0);
    session.Conclude(false, "No space left on device", end);
    EXPECT_EQ(session.info().phase(), v1::CAPTURE_PHASE_FAILED);
    EXPECT_TRUE(absl::StrContains(session.info().message(), "writing the trace failed"));
  }
}

}  // namespace
}  // namespace profd
