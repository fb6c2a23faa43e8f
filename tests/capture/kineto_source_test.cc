// A process captured through Kineto, alone: the config it is offered, how long the offer waits,
// and its row of the capture through delivery, expiry and the trace's deadline — on a clock the
// test sets. (The whole path, with a real Kineto socket and a process that polls it, is
// tests/integration/kineto_capture_test.cc.)
#include "daemon/capture/kineto_source.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

const absl::Time kRequested = absl::FromUnixSeconds(1'800'000'000);

v1::CaptureInfo Capture(absl::Duration delay) {
  v1::CaptureInfo info;
  info.set_capture_id("20270115T080000Z-node-kineto-source-test");
  info.set_requested_unix_ns(absl::ToUnixNanos(kRequested));
  info.set_start_at_unix_ns(absl::ToUnixNanos(kRequested + delay));
  info.set_duration_ms(2000);
  return info;
}

TEST(KinetoSourceTest, TheConfigCarriesTheWindowAndTheOptions) {
  v1::CaptureRequest request;
  request.set_record_shapes(true);
  request.set_profile_memory(true);
  kineto::KinetoTraceRequest now = KinetoSource::ConfigFor(Capture(absl::ZeroDuration()), request);
  EXPECT_EQ(now.duration, absl::Seconds(2));
  EXPECT_EQ(now.start_at, absl::InfinitePast());  // as soon as Kineto can
  EXPECT_TRUE(now.record_shapes);
  EXPECT_FALSE(now.with_stack);
  EXPECT_TRUE(now.profile_memory);
  kineto::KinetoTraceRequest later = KinetoSource::ConfigFor(Capture(absl::Seconds(30)), request);
  EXPECT_EQ(later.start_at, kRequested + absl::Seconds(30));

  // Two polls of at least 5 s after the start (or now, if later), then the start timeout.
  EXPECT_EQ(KinetoSource::OfferExpiry(Capture(absl::ZeroDuration()), absl::Seconds(1),
                                      absl::Seconds(3), kRequested),
            kRequested + absl::Seconds(13));
  EXPECT_EQ(KinetoSource::OfferExpiry(Capture(absl::Seconds(30)), absl::Seconds(10),
                                      absl::Seconds(3), kRequested),
            kRequested + absl::Seconds(53));
}

TEST(KinetoSourceTest, AnOfferNobodyTookFailsTheProcessSayingWhy) {
  TempDir dir;
  KinetoSource source(nullptr, 4242, getuid(), dir.path(), 1 << 20, 1);
  v1::ProcessCapture p;
  p.set_pid(4242);
  EXPECT_TRUE(source.Apply({KinetoSource::Event::kExpired, kRequested, 0},
                           Capture(absl::ZeroDuration()), absl::Seconds(5), &p));
  EXPECT_EQ(p.state(), v1::CAPTURE_STATE_FAILED);
  EXPECT_EQ(p.error(), v1::CAPTURE_ERROR_CUPTI_IN_USE);
  EXPECT_THAT(p.message(), HasSubstr("stopped polling profd's Kineto socket"));
  // A late delivery does not bring an ended row back.
  EXPECT_FALSE(source.Apply({KinetoSource::Event::kDelivered, kRequested, 7},
                            Capture(absl::ZeroDuration()), absl::Seconds(5), &p));
  EXPECT_EQ(p.state(), v1::CAPTURE_STATE_FAILED);
}

TEST(KinetoSourceTest, ADeliveredConfigStartsTheProcessAndItsTraceIsDueByTheDeadline) {
  TempDir dir;
  // This test's own process, which writes no Kineto trace: nothing to collect.
  KinetoSource source(nullptr, static_cast<uint32_t>(getpid()), getuid(), dir.path(), 1 << 20, 1);
  const v1::CaptureInfo capture = Capture(absl::ZeroDuration());
  v1::ProcessCapture p;
  p.set_pid(static_cast<uint32_t>(getpid()));
  const absl::Time delivered = kRequested + absl::Milliseconds(400);
  ASSERT_TRUE(source.Apply({KinetoSource::Event::kDelivered, delivered, 99}, capture,
                           absl::Seconds(5), &p));
  EXPECT_TRUE(source.delivered());
  EXPECT_EQ(p.state(), v1::CAPTURE_STATE_STARTED);
  // Kineto starts on its next tick after taking the config.
  const absl::Time start = delivered + kineto::kKinetoStartLead;
  EXPECT_EQ(p.enabled_unix_ns(), absl::ToUnixNanos(start));
  EXPECT_EQ(p.start_latency_ns(), absl::ToInt64Nanoseconds(start - kRequested));

  // Until the window's end + finish_timeout the missing trace is only not written yet.
  const absl::Time deadline = start + absl::Seconds(2) + absl::Seconds(5);
  EXPECT_FALSE(source.Collect(deadline, capture.duration_ms(), absl::Seconds(5), &p));
  EXPECT_EQ(p.state(), v1::CAPTURE_STATE_STARTED);
  EXPECT_TRUE(source.Collect(deadline + absl::Milliseconds(1), capture.duration_ms(),
                             absl::Seconds(5), &p));
  EXPECT_EQ(p.state(), v1::CAPTURE_STATE_FAILED);
  EXPECT_THAT(p.message(), HasSubstr("Kineto took the capture but wrote no trace within 5s"));
  EXPECT_FALSE(source.collected());
  // An ended row is left alone.
  EXPECT_FALSE(
      source.Collect(deadline + absl::Seconds(10), capture.duration_ms(), absl::Seconds(5), &p));
}

}  // namespace
}  // namespace profd
