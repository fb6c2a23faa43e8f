#include "daemon/alerts/alert_webhook.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "profd/v1/capture_limits.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd::alerts {
namespace {

constexpr char kComponent[] = "alerts";
constexpr const char* kRequestResultNames[] = {"accepted", "unauthorized", "bad_request",
                                               "not_found", "method_not_allowed"};

// Equal in time independent of where they differ: the token is a secret, compared against
// whatever anyone on the network sends.
bool SameSecret(absl::string_view given, absl::string_view secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(secret.empty() ? 0 : secret[i % secret.size()]);
  }
  return diff == 0 && !secret.empty();
}

// A value in a log line, logfmt's way: quoted, its quotes and backslashes escaped (the logger
// then makes the whole line printable), so that each field stays one key=value.
std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

std::string Targets(const v1::CaptureRequest& request) {
  std::vector<std::string> parts;
  for (uint32_t pid : request.pids()) parts.push_back(absl::StrCat("pid:", pid));
  if (!request.pod_name().empty()) {
    parts.push_back(
        absl::StrCat("pod:", request.pod_namespace().empty() ? "" : request.pod_namespace() + "/",
                     request.pod_name()));
  }
  return absl::StrJoin(parts, ",");
}

v1::CaptureAlert CaptureAlertOf(const AlertmanagerNotification& n, const AlertmanagerAlert& a) {
  v1::CaptureAlert alert;
  alert.set_name(a.name());
  alert.mutable_labels()->insert(a.labels.begin(), a.labels.end());
  alert.mutable_annotations()->insert(a.annotations.begin(), a.annotations.end());
  if (a.starts_at != absl::InfinitePast())
    alert.set_starts_at_unix_ns(absl::ToUnixNanos(a.starts_at));
  alert.set_generator_url(a.generator_url);
  alert.set_fingerprint(a.fingerprint);
  alert.set_group_key(n.group_key);
  alert.set_receiver(n.receiver);
  alert.set_external_url(n.external_url);
  return alert;
}

}  // namespace

AlertWebhook::AlertWebhook(AlertWebhookOptions options, AlertCaptures captures,
                           std::function<absl::Time()> clock)
    : options_(std::move(options)),
      captures_(std::move(captures)),
      clock_(std::move(clock)),
      policy_(options_.policy, captures_.is_running),
      refused_requests_log_(kComponent, "webhook requests refused", Severity::kWarning, 10,
                            "see /metrics: profd_alert_webhook_requests_total") {}

bool AlertWebhook::Authorized(const HttpRequest& request) const {
  if (options_.token.empty()) return true;  // mutual TLS authenticated the sender
  absl::string_view value = request.authorization;
  // RFC 9110: the scheme is case-insensitive; Alertmanager sends "Bearer <credentials>".
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) return false;
  return SameSecret(absl::StripAsciiWhitespace(value.substr(7)), options_.token);
}

HttpResponse AlertWebhook::Answer(RequestResult result, int code, const char* reason,
                                  std::string text) {
  requests_[static_cast<int>(result)].fetch_add(1);
  HttpResponse response = HttpResponse::Text(code, reason, std::move(text));
  if (result == RequestResult::kUnauthorized) {
    response.extra_headers = "WWW-Authenticate: Bearer realm=\"profd alerts\"\r\n";
  }
  return response;
}

HttpResponse AlertWebhook::Handle(const HttpRequest& request) {
  // How many refusals the budget left out, once per interval.
  refused_requests_log_.Summarize(clock_());
  if (request.path != kWebhookPath) {
    return Answer(RequestResult::kNotFound, 404, "Not Found",
                  absl::StrCat("profd's alert listener serves POST ", kWebhookPath,
                               " (Alertmanager's webhook_configs url)\n"));
  }
  if (request.method != "POST") {
    return Answer(RequestResult::kMethodNotAllowed, 405, "Method Not Allowed",
                  absl::StrCat(kWebhookPath, " takes POST from Alertmanager\n"));
  }
  if (!Authorized(request)) {
    refused_requests_log_.Log(absl::StrCat(
        "webhook request refused: ",
        request.authorization.empty() ? "no Authorization header" : "a wrong bearer token",
        " (--alert_token_file; Alertmanager's http_config.authorization)"));
    return Answer(RequestResult::kUnauthorized, 401, "Unauthorized",
                  "a bearer token is required (Authorization: Bearer <the token of profd's "
                  "--alert_token_file>)\n");
  }
  absl::StatusOr<AlertmanagerNotification> notification =
      ParseAlertmanagerNotification(request.body);
  if (!notification.ok()) {
    // Alertmanager logs the answer and does not retry a 4xx: the line here says what came.
    refused_requests_log_.Log(absl::StrCat("webhook request refused (", request.body.size(),
                                           " bytes): ", notification.status().message()));
    return Answer(RequestResult::kBadRequest, 400, "Bad Request",
                  absl::StrCat(notification.status().message(), "\n"));
  }
  // One answer line per alert, in order: what profd did and why.
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("alerts");
  w.StartArray();
  for (const AlertmanagerAlert& alert : notification->alerts) {
    const Outcome outcome = Consider(*notification, alert);
    w.StartObject();
    w.Key("alertname");
    w.String(alert.name().c_str(), static_cast<rapidjson::SizeType>(alert.name().size()));
    w.Key("decision");
    w.String(AlertDecisionName(outcome.decision));
    if (!outcome.capture_id.empty()) {
      w.Key("capture_id");
      w.String(outcome.capture_id.c_str());
    }
    if (!outcome.why.empty()) {
      w.Key("why");
      w.String(outcome.why.c_str(), static_cast<rapidjson::SizeType>(outcome.why.size()));
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  HttpResponse response = Answer(RequestResult::kAccepted, 200, "OK",
                                 std::string(buffer.GetString(), buffer.GetSize()));
  response.content_type = "application/json";
  return response;
}

AlertWebhook::Outcome AlertWebhook::Consider(const AlertmanagerNotification& notification,
                                             const AlertmanagerAlert& alert) {
  Outcome outcome{AlertDecision::kRefused, "", ""};
  if (!alert.firing) {
    outcome.decision = AlertDecision::kResolved;
    Record(notification, alert, outcome, nullptr);
    return outcome;
  }
  absl::StatusOr<v1::CaptureRequest> request = CaptureRequestForAlert(alert, options_.capture);
  if (!request.ok()) {
    outcome.why = std::string(request.status().message());
    Record(notification, alert, outcome, nullptr);
    return outcome;
  }
  *request->mutable_alert() = CaptureAlertOf(notification, alert);
  if (request->alert().ByteSizeLong() > v1::kMaxAlertBytes) {
    // Too large to keep whole: its annotations (descriptions, runbooks) go, its labels stay.
    request->mutable_alert()->clear_annotations();
  }
  const absl::Time now = clock_();
  const std::string firing =
      absl::StrCat(alert.fingerprint, "@", absl::ToUnixNanos(alert.starts_at));
  AlertPolicy::Verdict verdict = policy_.Decide(notification.group_key, firing, now);
  if (verdict.decision != AlertDecision::kStarted) {
    outcome.decision = verdict.decision;
    outcome.why = std::move(verdict.why);
    Record(notification, alert, outcome, &*request);
    return outcome;
  }
  absl::StatusOr<std::string> id = captures_.start(*request);
  if (!id.ok()) {
    outcome.why = absl::StrCat("the capture was refused: ", id.status().message());
    Record(notification, alert, outcome, &*request);
    return outcome;
  }
  policy_.Started(notification.group_key, firing, *id, now);
  outcome.decision = AlertDecision::kStarted;
  outcome.capture_id = *id;
  Record(notification, alert, outcome, &*request);
  return outcome;
}

void AlertWebhook::Record(const AlertmanagerNotification& notification,
                          const AlertmanagerAlert& alert, const Outcome& outcome,
                          const v1::CaptureRequest* request) {
  decisions_[static_cast<int>(outcome.decision)].fetch_add(1);
  // One line per decision, key=value: what a log pipeline or a person needs to follow an alert
  // to its capture, or to why there is none.
  const std::string line = absl::StrCat(
      "decision=", AlertDecisionName(outcome.decision), " alertname=", Quoted(alert.name()),
      " group_key=", Quoted(notification.group_key), " fingerprint=", Quoted(alert.fingerprint),
      request != nullptr ? absl::StrCat(" targets=", Targets(*request)) : "",
      outcome.capture_id.empty() ? "" : absl::StrCat(" capture=", outcome.capture_id),
      outcome.why.empty() ? "" : absl::StrCat(" why=", Quoted(outcome.why)));
  LogLine(outcome.decision == AlertDecision::kRefused ? Severity::kWarning : Severity::kInfo,
          kComponent, line);
}

DaemonMetrics::Snapshot::Alerts AlertWebhook::counts() const {
  DaemonMetrics::Snapshot::Alerts out;
  out.active = true;
  for (int i = 0; i < kRequestResultCount; ++i) {
    out.requests.emplace_back(kRequestResultNames[i], requests_[i].load());
  }
  for (int i = 0; i < kAlertDecisionCount; ++i) {
    out.decisions.emplace_back(AlertDecisionName(static_cast<AlertDecision>(i)),
                               decisions_[i].load());
  }
  return out;
}

}  // namespace profd::alerts
