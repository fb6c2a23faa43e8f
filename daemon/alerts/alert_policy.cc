#include "daemon/alerts/alert_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace profd::alerts {
namespace {

// Firings remembered per group: a group whose alerts fire and resolve over and over forgets its
// oldest (a forgotten firing is still held back by the cooldown).
constexpr size_t kMaxFiringsPerGroup = 64;

}  // namespace

const char* AlertDecisionName(AlertDecision decision) {
  switch (decision) {
    case AlertDecision::kStarted:
      return "started";
    case AlertDecision::kDeduplicated:
      return "deduplicated";
    case AlertDecision::kCooledDown:
      return "cooled_down";
    case AlertDecision::kRateLimited:
      return "rate_limited";
    case AlertDecision::kRefused:
      return "refused";
    case AlertDecision::kResolved:
      return "resolved";
  }
  return "refused";
}

AlertPolicy::AlertPolicy(AlertPolicyOptions options, IsRunning is_running)
    : options_(std::move(options)), is_running_(std::move(is_running)) {}

uint32_t AlertPolicy::Running() {
  for (auto it = running_.begin(); it != running_.end();) {
    it = is_running_(*it) ? std::next(it) : running_.erase(it);
  }
  return static_cast<uint32_t>(running_.size());
}

AlertPolicy::Verdict AlertPolicy::Decide(const std::string& group_key, const std::string& firing,
                                         absl::Time now) {
  while (!started_.empty() && started_.front() <= now - absl::Hours(1)) started_.pop_front();
  auto it = groups_.find(group_key);
  if (it != groups_.end()) {
    Group& group = it->second;
    group.touched = ++touches_;
    if (group.firings.count(firing) > 0) {
      return {AlertDecision::kDeduplicated,
              absl::StrCat("this firing already started capture ", group.capture_id)};
    }
    if (!group.capture_id.empty() && running_.count(group.capture_id) > 0 &&
        is_running_(group.capture_id)) {
      return {AlertDecision::kDeduplicated,
              absl::StrCat("its group's capture ", group.capture_id, " is running")};
    }
    if (now - group.last_started < options_.cooldown) {
      return {AlertDecision::kCooledDown,
              absl::StrCat("its group started capture ", group.capture_id, " ",
                           absl::FormatDuration(
                               absl::Trunc(now - group.last_started, absl::Milliseconds(1))),
                           " ago; --alert_cooldown is ", absl::FormatDuration(options_.cooldown))};
    }
  }
  if (const uint32_t running = Running(); running >= options_.max_concurrent) {
    return {AlertDecision::kRefused,
            absl::StrCat(running, " captures started by alerts are running (at most ",
                         options_.max_concurrent, ", --alert_max_concurrent_captures)")};
  }
  if (started_.size() >= options_.max_per_hour) {
    return {AlertDecision::kRateLimited,
            absl::StrCat(started_.size(), " captures started by alerts in the last hour (at most ",
                         options_.max_per_hour, ", --alert_max_captures_per_hour)")};
  }
  return {AlertDecision::kStarted, ""};
}

void AlertPolicy::Started(const std::string& group_key, const std::string& firing,
                          const std::string& capture_id, absl::Time now) {
  Group& group = groups_[group_key];
  group.last_started = now;
  group.capture_id = capture_id;
  group.touched = ++touches_;
  if (group.firings.insert(firing).second) group.firing_order.push_back(firing);
  while (group.firing_order.size() > kMaxFiringsPerGroup) {
    group.firings.erase(group.firing_order.front());
    group.firing_order.pop_front();
  }
  started_.push_back(now);
  running_.insert(capture_id);
  Forget();
}

void AlertPolicy::Forget() {
  while (groups_.size() > options_.max_groups) {
    auto oldest = std::min_element(
        groups_.begin(), groups_.end(),
        [](const auto& a, const auto& b) { return a.second.touched < b.second.touched; });
    groups_.erase(oldest);
  }
}

}  // namespace profd::alerts
