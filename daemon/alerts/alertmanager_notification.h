// Alertmanager's webhook notification (webhook_configs, JSON payload "version": "4"), read into
// plain structs. The body comes from the network: it is bounded by the HTTP server before it gets
// here, and anything that is not the documented shape is refused whole, with the JSON path of
// what was wrong, so that Alertmanager's log and profd's say the same thing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace profd::alerts {

struct AlertmanagerAlert {
  bool firing = false;  // status "firing"; false: "resolved"
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  absl::Time starts_at = absl::InfinitePast();
  std::string generator_url;
  std::string fingerprint;  // Alertmanager >= 0.19; else made from the labels (Fingerprint)

  std::string name() const;  // labels["alertname"], "" without one
};

struct AlertmanagerNotification {
  std::string version;  // "4"
  std::string group_key;
  bool firing = false;  // the group's status
  std::string receiver;
  std::string external_url;
  std::map<std::string, std::string> group_labels;
  std::vector<AlertmanagerAlert> alerts;
  uint64_t truncated_alerts = 0;  // alerts Alertmanager left out (its max_alerts)
};

// INVALID_ARGUMENT naming the offending member (e.g. "alerts[2].labels.pid: expected a string")
// for anything but a JSON object of payload version 4 with a groupKey and an alerts array.
// Unknown members are ignored (later Alertmanagers add some).
absl::StatusOr<AlertmanagerNotification> ParseAlertmanagerNotification(absl::string_view body);

}  // namespace profd::alerts
