// The bounds on captures started by alerts, driven by a test clock: one capture per firing and per
// group within the cooldown, a cap on those running and on those started per hour.
#include "daemon/alerts/alert_policy.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace profd::alerts {
namespace {

using ::testing::HasSubstr;

class AlertPolicyTest : public ::testing::Test {
 protected:
  AlertPolicy Make(AlertPolicyOptions options) {
    return AlertPolicy(options, [this](const std::string& id) { return running_.count(id) > 0; });
  }
  // Decides at now_ and, when allowed, starts capture `id`.
  AlertDecision Fire(AlertPolicy& policy, const std::string& group, const std::string& firing,
                     const std::string& id, std::string* why = nullptr) {
    AlertPolicy::Verdict v = policy.Decide(group, firing, now_);
    if (why != nullptr) *why = v.why;
    if (v.decision == AlertDecision::kStarted) {
      policy.Started(group, firing, id, now_);
      running_.insert(id);
    }
    return v.decision;
  }

  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
  std::set<std::string> running_;
};

TEST_F(AlertPolicyTest, RepeatsAreDeduplicatedAndTheGroupCoolsDown) {
  AlertPolicy policy =
      Make({.cooldown = absl::Minutes(10), .max_per_hour = 100, .max_concurrent = 5});
  std::string why;
  EXPECT_EQ(Fire(policy, "g", "f1@1", "c1"), AlertDecision::kStarted);
  // Alertmanager's repeat of the same firing while the capture runs, and after it ended.
  EXPECT_EQ(Fire(policy, "g", "f1@1", "c2", &why), AlertDecision::kDeduplicated);
  EXPECT_THAT(why, HasSubstr("this firing already started capture c1"));
  // Another alert of the group while its capture runs.
  EXPECT_EQ(Fire(policy, "g", "f2@1", "c2", &why), AlertDecision::kDeduplicated);
  EXPECT_THAT(why, HasSubstr("its group's capture c1 is running"));
  running_.erase("c1");
  now_ += absl::Minutes(3);
  EXPECT_EQ(Fire(policy, "g", "f1@1", "c2"), AlertDecision::kDeduplicated);
  EXPECT_EQ(Fire(policy, "g", "f2@1", "c2", &why), AlertDecision::kCooledDown);
  EXPECT_THAT(why, HasSubstr("its group started capture c1 3m ago; --alert_cooldown is 10m"));
  // Other groups are not held back.
  EXPECT_EQ(Fire(policy, "h", "f3@1", "c3"), AlertDecision::kStarted);
  // After the cooldown a new firing of the group starts one; the old firing still does not.
  now_ += absl::Minutes(7);
  EXPECT_EQ(Fire(policy, "g", "f1@1", "c4"), AlertDecision::kDeduplicated);
  EXPECT_EQ(Fire(policy, "g", "f1@2", "c4"), AlertDecision::kStarted);
}

TEST_F(AlertPolicyTest, ConcurrentCapturesAreCapped) {
  AlertPolicy policy =
      Make({.cooldown = absl::ZeroDuration(), .max_per_hour = 100, .max_concurrent = 2});
  std::string why;
  EXPECT_EQ(Fire(policy, "a", "1", "ca"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "b", "1", "cb"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "c", "1", "cc", &why), AlertDecision::kRefused);
  EXPECT_THAT(why, HasSubstr("2 captures started by alerts are running (at most 2, "
                             "--alert_max_concurrent_captures)"));
  running_.erase("ca");  // finished: its slot is free again
  EXPECT_EQ(Fire(policy, "c", "1", "cc"), AlertDecision::kStarted);
}

TEST_F(AlertPolicyTest, StartsPerHourAreCappedOverASlidingHour) {
  AlertPolicy policy =
      Make({.cooldown = absl::ZeroDuration(), .max_per_hour = 3, .max_concurrent = 10});
  std::string why;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Fire(policy, "g" + std::to_string(i), "1", "c" + std::to_string(i)),
              AlertDecision::kStarted);
    running_.clear();
    now_ += absl::Minutes(10);
  }
  EXPECT_EQ(Fire(policy, "g9", "1", "c9", &why), AlertDecision::kRateLimited);
  EXPECT_THAT(why, HasSubstr("3 captures started by alerts in the last hour (at most 3"));
  now_ += absl::Minutes(30);  // the first start is now over an hour old
  EXPECT_EQ(Fire(policy, "g9", "1", "c9"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "g10", "1", "c10"), AlertDecision::kRateLimited);
}

TEST_F(AlertPolicyTest, ARefusedCaptureUsesNoSlotAndGroupsAreBounded) {
  AlertPolicy policy = Make(
      {.cooldown = absl::Hours(1), .max_per_hour = 1000, .max_concurrent = 1000, .max_groups = 2});
  // Decided but never Started (the orchestrator refused): the next try is free to start.
  EXPECT_EQ(policy.Decide("g", "1", now_).decision, AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "g", "1", "c1"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "h", "1", "c2"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "i", "1", "c3"), AlertDecision::kStarted);
  // Only two groups are remembered: the least recent, g, is forgotten.
  running_.clear();
  EXPECT_EQ(Fire(policy, "g", "1", "c4"), AlertDecision::kStarted);
  EXPECT_EQ(Fire(policy, "i", "2", "c5"), AlertDecision::kCooledDown);
}

TEST(AlertDecisionTest, NamesAreTheMetricsLabels) {
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kStarted), "started");
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kDeduplicated), "deduplicated");
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kCooledDown), "cooled_down");
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kRateLimited), "rate_limited");
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kRefused), "refused");
  EXPECT_STREQ(AlertDecisionName(AlertDecision::kResolved), "resolved");
}

}  // namespace
}  // namespace profd::alerts
