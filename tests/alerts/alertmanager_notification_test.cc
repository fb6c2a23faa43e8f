// Alertmanager's webhook payload (version 4) as Alertmanager 0.25 sends it, and what is refused:
// each refusal names the member that was wrong.
#include "daemon/alerts/alertmanager_notification.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace profd::alerts {
namespace {

using ::testing::HasSubstr;

// Byte for byte the shape Alertmanager 0.25's webhook notifier writes (notify/webhook).
constexpr char kFiring[] = R"({
  "receiver": "profd-capture",
  "status": "firing",
  "alerts": [
    {
      "status": "firing",
      "labels": {"alertname": "ProfdKernelLaunchRateCollapsed", "hostname": "node-7",
                 "namespace": "serving", "pod": "llm-7f9c", "pid": "4242", "severity": "warning"},
      "annotations": {"summary": "pid 4242 nearly stopped", "profd_capture_duration": "2s"},
      "startsAt": "2026-12-01T22:10:03.123456789Z",
      "endsAt": "0001-01-01T00:00:00Z",
      "generatorURL": "http://prometheus:9090/graph?g0.expr=rate%28x%29&g0.tab=1",
      "fingerprint": "3f2a9b0c1d4e5f60"
    }
  ],
  "groupLabels": {"alertname": "ProfdKernelLaunchRateCollapsed", "pid": "4242"},
  "commonLabels": {"alertname": "ProfdKernelLaunchRateCollapsed"},
  "commonAnnotations": {},
  "externalURL": "http://alertmanager:9093",
  "version": "4",
  "groupKey": "{}/{alertname=~\"^(?:Profd.*)$\"}:{alertname=\"ProfdKernelLaunchRateCollapsed\", pid=\"4242\"}",
  "truncatedAlerts": 0
})";

TEST(AlertmanagerNotificationTest, ReadsWhatAlertmanagerSends) {
  absl::StatusOr<AlertmanagerNotification> n = ParseAlertmanagerNotification(kFiring);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->version, "4");
  EXPECT_TRUE(n->firing);
  EXPECT_EQ(n->receiver, "profd-capture");
  EXPECT_EQ(n->external_url, "http://alertmanager:9093");
  EXPECT_THAT(n->group_key, HasSubstr("pid=\"4242\""));
  EXPECT_EQ(n->group_labels.at("pid"), "4242");
  ASSERT_EQ(n->alerts.size(), 1u);
  const AlertmanagerAlert& a = n->alerts[0];
  EXPECT_TRUE(a.firing);
  EXPECT_EQ(a.name(), "ProfdKernelLaunchRateCollapsed");
  EXPECT_EQ(a.labels.at("pod"), "llm-7f9c");
  EXPECT_EQ(a.annotations.at("profd_capture_duration"), "2s");
  EXPECT_EQ(a.fingerprint, "3f2a9b0c1d4e5f60");
  EXPECT_EQ(a.generator_url, "http://prometheus:9090/graph?g0.expr=rate%28x%29&g0.tab=1");
  absl::Time want;
  std::string err;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, "2026-12-01T22:10:03.123456789Z", &want, &err));
  EXPECT_EQ(a.starts_at, want);
  EXPECT_EQ(absl::ToUnixNanos(a.starts_at) % 1000000000, 123456789);
}

TEST(AlertmanagerNotificationTest, ResolvedAlertsAndOldAlertmanagersWithoutFingerprints) {
  std::string body = kFiring;
  body.replace(body.find("\"status\": \"firing\",\n      \"labels\""), 18,
               "\"status\": \"resolved\"");
  body.replace(body.find("\"fingerprint\": \"3f2a9b0c1d4e5f60\""), 33, "\"x\": 1");
  absl::StatusOr<AlertmanagerNotification> n = ParseAlertmanagerNotification(body);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_FALSE(n->alerts[0].firing);
  // Made from the labels, so that the same alert keeps the same one.
  EXPECT_THAT(n->alerts[0].fingerprint, HasSubstr("pid=4242,"));
  absl::StatusOr<AlertmanagerNotification> again = ParseAlertmanagerNotification(body);
  EXPECT_EQ(again->alerts[0].fingerprint, n->alerts[0].fingerprint);
}

// Each malformed body is refused whole with the path of what was wrong; none crashes.
TEST(AlertmanagerNotificationTest, MalformedBodiesSayWhatIsWrong) {
  auto error = [](const std::string& body) {
    absl::StatusOr<AlertmanagerNotification> n = ParseAlertmanagerNotification(body);
    EXPECT_FALSE(n.ok()) << body;
    if (n.ok()) return std::string();
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(n.status().message());
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string body = kFiring;
    const size_t at = body.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return body.replace(at, from.size(), to);
  };
  EXPECT_THAT(error(""), HasSubstr("not JSON"));
  EXPECT_THAT(error("{\"version\": \"4\", "), HasSubstr("byte 17: not JSON"));
  EXPECT_THAT(error("[1, 2]"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(error(with("\"version\": \"4\"", "\"version\": \"3\"")),
              HasSubstr("version: expected \"4\", got \"3\""));
  EXPECT_THAT(error(with("\"version\": \"4\"", "\"version\": 4")),
              HasSubstr("version: expected a string"));
  EXPECT_THAT(error(with("\"groupKey\"", "\"group\"")), HasSubstr("groupKey: missing"));
  EXPECT_THAT(error(with("\"alerts\": [", "\"alerts\": {\"a\": [")), HasSubstr("not JSON"));
  EXPECT_THAT(error(with("\"pid\": \"4242\", \"severity\"", "\"pid\": 4242, \"severity\"")),
              HasSubstr("alerts[0].labels.pid: expected a string"));
  EXPECT_THAT(error(with("\"status\": \"firing\",\n      \"labels\"",
                         "\"status\": \"pending\",\n      \"labels\"")),
              HasSubstr("alerts[0].status: expected \"firing\" or \"resolved\", got \"pending\""));
  EXPECT_THAT(error(with("2026-12-01T22:10:03.123456789Z", "yesterday")),
              HasSubstr("alerts[0].startsAt: expected an RFC 3339 time, got \"yesterday\""));
  EXPECT_THAT(error(with("\"annotations\": {", "\"annotations\": [{")), HasSubstr("not JSON"));
  EXPECT_THAT(error(with("\"truncatedAlerts\": 0", "\"truncatedAlerts\": -1")),
              HasSubstr("truncatedAlerts: expected a count"));
  // A million nested arrays: refused, not a stack overflow.
  EXPECT_THAT(error(std::string(1 << 20, '[')), HasSubstr("not JSON"));
}

}  // namespace
}  // namespace profd::alerts
