#include "daemon/alerts/alertmanager_notification.h"

#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "rapidjson/error/en.h"

namespace profd::alerts {
namespace {

using Value = rapidjson::Value;

absl::Status Bad(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not an Alertmanager webhook notification (payload version 4): ", where, ": ", what));
}

// A string member; absent is "" unless required.
absl::Status ReadString(const Value& object, const char* name, const std::string& where,
                        bool required, std::string* out) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || it->value.IsNull()) {
    return required ? Bad(absl::StrCat(where, name), "missing") : absl::OkStatus();
  }
  if (!it->value.IsString()) return Bad(absl::StrCat(where, name), "expected a string");
  out->assign(it->value.GetString(), it->value.GetStringLength());
  return absl::OkStatus();
}

// An object of strings (labels, annotations); absent or null is empty.
absl::Status ReadStringMap(const Value& object, const char* name, const std::string& where,
                           std::map<std::string, std::string>* out) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || it->value.IsNull()) return absl::OkStatus();
  const std::string path = absl::StrCat(where, name);
  if (!it->value.IsObject()) return Bad(path, "expected an object of strings");
  for (const auto& member : it->value.GetObject()) {
    const std::string key(member.name.GetString(), member.name.GetStringLength());
    if (!member.value.IsString()) return Bad(absl::StrCat(path, ".", key), "expected a string");
    (*out)[key] = std::string(member.value.GetString(), member.value.GetStringLength());
  }
  return absl::OkStatus();
}

absl::Status ReadStatus(const Value& object, const std::string& where, bool* firing) {
  std::string status;
  if (absl::Status s = ReadString(object, "status", where, /*required=*/true, &status); !s.ok()) {
    return s;
  }
  if (status != "firing" && status != "resolved") {
    return Bad(absl::StrCat(where, "status"),
               absl::StrCat("expected \"firing\" or \"resolved\", got \"", status, "\""));
  }
  *firing = status == "firing";
  return absl::OkStatus();
}

absl::StatusOr<AlertmanagerAlert> ReadAlert(const Value& v, const std::string& where) {
  if (!v.IsObject()) return Bad(where, "expected an object");
  const std::string prefix = where + ".";
  AlertmanagerAlert alert;
  if (absl::Status s = ReadStatus(v, prefix, &alert.firing); !s.ok()) return s;
  if (absl::Status s = ReadStringMap(v, "labels", prefix, &alert.labels); !s.ok()) return s;
  if (absl::Status s = ReadStringMap(v, "annotations", prefix, &alert.annotations); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadString(v, "generatorURL", prefix, false, &alert.generator_url);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadString(v, "fingerprint", prefix, false, &alert.fingerprint); !s.ok()) {
    return s;
  }
  std::string starts;
  if (absl::Status s = ReadString(v, "startsAt", prefix, false, &starts); !s.ok()) return s;
  if (!starts.empty()) {
    std::string error;
    if (!absl::ParseTime(absl::RFC3339_full, starts, &alert.starts_at, &error)) {
      return Bad(prefix + "startsAt",
                 absl::StrCat("expected an RFC 3339 time, got \"", starts, "\" (", error, ")"));
    }
  }
  if (alert.fingerprint.empty()) {
    // Older Alertmanagers send none: the sorted labels stand for it (they are what it hashes).
    for (const auto& [k, value] : alert.labels) {
      absl::StrAppend(&alert.fingerprint, k, "=", value, ",");
    }
  }
  return alert;
}

}  // namespace

std::string AlertmanagerAlert::name() const {
  auto it = labels.find("alertname");
  return it == labels.end() ? "" : it->second;
}

absl::StatusOr<AlertmanagerNotification> ParseAlertmanagerNotification(absl::string_view body) {
  rapidjson::Document doc;
  // Iterative: a body of nested brackets cannot exhaust the stack.
  doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (doc.HasParseError()) {
    return Bad(absl::StrCat("byte ", doc.GetErrorOffset()),
               absl::StrCat("not JSON: ", rapidjson::GetParseError_En(doc.GetParseError())));
  }
  if (!doc.IsObject()) return Bad("the body", "expected a JSON object");
  AlertmanagerNotification n;
  if (absl::Status s = ReadString(doc, "version", "", /*required=*/true, &n.version); !s.ok()) {
    return s;
  }
  if (n.version != "4") {
    return Bad("version", absl::StrCat("expected \"4\", got \"", n.version,
                                       "\": an Alertmanager this profd does not know"));
  }
  if (absl::Status s = ReadString(doc, "groupKey", "", /*required=*/true, &n.group_key); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadStatus(doc, "", &n.firing); !s.ok()) return s;
  if (absl::Status s = ReadString(doc, "receiver", "", false, &n.receiver); !s.ok()) return s;
  if (absl::Status s = ReadString(doc, "externalURL", "", false, &n.external_url); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadStringMap(doc, "groupLabels", "", &n.group_labels); !s.ok()) return s;
  if (auto it = doc.FindMember("truncatedAlerts"); it != doc.MemberEnd()) {
    if (!it->value.IsUint64()) return Bad("truncatedAlerts", "expected a count");
    n.truncated_alerts = it->value.GetUint64();
  }
  auto alerts = doc.FindMember("alerts");
  if (alerts == doc.MemberEnd()) return Bad("alerts", "missing");
  if (!alerts->value.IsArray()) return Bad("alerts", "expected an array");
  for (rapidjson::SizeType i = 0; i < alerts->value.Size(); ++i) {
    absl::StatusOr<AlertmanagerAlert> alert =
        ReadAlert(alerts->value[i], absl::StrCat("alerts[", i, "]"));
    if (!alert.ok()) return alert.status();
    n.alerts.push_back(*std::move(alert));
  }
  return n;
}

}  // namespace profd::alerts
