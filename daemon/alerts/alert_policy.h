// Whether a firing alert may start a capture now: the bounds that keep a flapping rule, a storm of
// alerts or Alertmanager's repeats from turning profd into a load generator. No threads and no
// clock of its own: the caller serializes the calls and passes the time, so tests drive it.
//
// In the order they are checked, for one alert of a notification:
//   deduplicated  this alert (its fingerprint and startsAt: one firing) already started a
//                 capture, or its group's capture is still running: Alertmanager repeats a
//                 notification every repeat_interval and after every change in the group
//   cooled down   its group started a capture less than `cooldown` ago
//   refused       `max_concurrent` captures started by alerts are running
//   rate limited  `max_per_hour` captures were started by alerts in the last hour, all groups
//   start         otherwise; the caller then says Started() or, when the capture was refused,
//                 nothing (a refused capture uses no slot)
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/time/time.h"

namespace profd::alerts {

struct AlertPolicyOptions {
  absl::Duration cooldown = absl::Minutes(10);  // per group key
  uint32_t max_per_hour = 12;                   // captures started by alerts, all groups
  uint32_t max_concurrent = 2;                  // captures started by alerts, running at once
  // Groups remembered (their last capture and firings); past it the least recent is forgotten.
  size_t max_groups = 4096;
};

enum class AlertDecision {
  kStarted,
  kDeduplicated,
  kCooledDown,
  kRateLimited,
  kRefused,   // a bound, a target profd cannot capture, or an alert it cannot read
  kResolved,  // resolved alerts start nothing
};
inline constexpr int kAlertDecisionCount = 6;
// "started", "deduplicated", "cooled_down", "rate_limited", "refused", "resolved": the
// `decision` label of profd_alert_decisions_total and the log.
const char* AlertDecisionName(AlertDecision decision);

class AlertPolicy {
 public:
  // Whether capture `id` still runs (CaptureOrchestrator: not in a terminal phase).
  using IsRunning = std::function<bool(const std::string& capture_id)>;

  AlertPolicy(AlertPolicyOptions options, IsRunning is_running);

  struct Verdict {
    AlertDecision decision = AlertDecision::kStarted;  // kStarted: may start
    std::string why;                                   // for the others
  };
  // `firing` names one firing of one alert (its fingerprint and startsAt).
  Verdict Decide(const std::string& group_key, const std::string& firing, absl::Time now);
  // The capture Decide allowed was started.
  void Started(const std::string& group_key, const std::string& firing,
               const std::string& capture_id, absl::Time now);

 private:
  struct Group {
    absl::Time last_started = absl::InfinitePast();
    std::string capture_id;         // its last capture
    std::set<std::string> firings;  // that started one (bounded: kMaxFiringsPerGroup)
    std::deque<std::string> firing_order;
    uint64_t touched = 0;  // for forgetting the least recent group
  };
  uint32_t Running();
  void Forget();

  const AlertPolicyOptions options_;
  const IsRunning is_running_;
  std::map<std::string, Group> groups_;
  std::deque<absl::Time> started_;  // starts within the last hour, oldest first
  std::set<std::string> running_;   // capture ids started here, until they end
  uint64_t touches_ = 0;
};

}  // namespace profd::alerts
