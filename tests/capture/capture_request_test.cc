// The request check profctl and profd share: each field's bound, at and past it, in the words
// both print.
#include "daemon/capture/capture_request.h"

#include <string>

#include "common/capture_id.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profd/v1/capture_limits.h"

namespace profd {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

v1::CaptureRequest Request() {
  v1::CaptureRequest r;
  r.set_duration_ms(5000);
  return r;
}

std::string Refusal(const v1::CaptureRequest& r) {
  absl::Status s = CheckCaptureRequest(r, kNow);
  EXPECT_TRUE(s.ok() || absl::IsInvalidArgument(s)) << s;
  return std::string(s.message());
}

TEST(CaptureRequestTest, EachFieldIsCheckedAtItsBound) {
  EXPECT_EQ(Refusal(Request()), "");

  v1::CaptureRequest r = Request();
  r.set_duration_ms(0);
  EXPECT_THAT(Refusal(r), HasSubstr("duration must be more than 0"));

  r = Request();
  r.set_delay_ms(-1);
  EXPECT_THAT(Refusal(r), HasSubstr("delay must not be negative"));
  r.set_delay_ms(v1::kMaxStartDelayMs);
  EXPECT_EQ(Refusal(r), "");
  r.set_delay_ms(v1::kMaxStartDelayMs + 1);
  EXPECT_THAT(Refusal(r), HasSubstr("is over the limit of 1h"));

  r = Request();
  r.set_start_at_unix_ns(absl::ToUnixNanos(kNow + absl::Minutes(59)));
  EXPECT_EQ(Refusal(r), "");
  r.set_start_at_unix_ns(absl::ToUnixNanos(kNow - absl::Milliseconds(500)));  // clocks differ
  EXPECT_EQ(Refusal(r), "");
  for (absl::Duration off : {absl::Hours(2), -absl::Minutes(1)}) {
    r.set_start_at_unix_ns(absl::ToUnixNanos(kNow + off));
    EXPECT_THAT(Refusal(r), HasSubstr("--start-at must be within the next hour"));
  }

  r = Request();
  r.set_label(std::string(v1::kMaxLabelBytes, 'x'));
  EXPECT_EQ(Refusal(r), "");
  r.set_label(std::string(v1::kMaxLabelBytes + 1, 'x'));
  EXPECT_THAT(Refusal(r), HasSubstr("a label may have at most 4096"));

  r = Request();
  r.set_trace_format("perfetto");
  EXPECT_EQ(Refusal(r), "");
  r.set_trace_format("parquet");
  EXPECT_THAT(Refusal(r),
              HasSubstr("--format parquet is not a trace format: give json or perfetto"));

  r = Request();
  for (int i = 0; i < 1024; ++i) r.add_pods("serving/llm-" + std::to_string(i));
  EXPECT_EQ(Refusal(r), "");
  r.add_pods("serving/one-too-many");
  EXPECT_THAT(Refusal(r), HasSubstr("one node's capture takes at most 1024"));

  r = Request();
  r.set_fleet_id(NewFleetId(kNow));
  EXPECT_EQ(Refusal(r), "");
  r.set_fleet_id("../../etc");
  EXPECT_THAT(Refusal(r), HasSubstr("fleet id '../../etc' is not one"));

  r = Request();
  r.set_gpu_metrics(true);
  EXPECT_EQ(Refusal(r), "");  // profd's default interval
  r.set_gpu_metrics_interval_ns(20'000);
  EXPECT_EQ(Refusal(r), "");
  r.set_gpu_metrics_interval_ns(19'999);
  EXPECT_THAT(Refusal(r), HasSubstr("outside 20us..1s"));
  r.set_gpu_metrics_interval_ns(2'000'000'000);
  EXPECT_THAT(Refusal(r), HasSubstr("outside 20us..1s"));
}

}  // namespace
}  // namespace profd
