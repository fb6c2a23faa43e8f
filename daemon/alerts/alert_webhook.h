// Alertmanager's webhook receiver: POST /alerts on profd's alert listener (--alert_address).
// A request must carry the bearer token of --alert_token_file (Alertmanager's http_config
// `authorization`); its body is a webhook notification (payload version 4). Each firing alert in
// it names processes on this node (AlertCaptureContext) and, when AlertPolicy allows, starts a
// capture of them through CaptureOrchestrator, the alert kept in the capture's manifest. Each
// decision is one log line and a count (profd_alert_decisions_total); the answer lists them.
//
// Thread: Handle runs on the alert listener's HTTP thread, one request at a time (the policy's
// state needs no lock). Starting a capture takes milliseconds (the agents are told through
// their queues), up to a second for one with GPU metrics, whose sampler must start first: the
// listener's other requests wait that long. counts() is read by /metrics from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "daemon/alerts/alert_capture_request.h"
#include "daemon/alerts/alert_policy.h"
#include "daemon/log.h"
#include "daemon/metrics/daemon_metrics.h"
#include "profd/v1/profd.pb.h"

namespace profd::alerts {

inline constexpr char kWebhookPath[] = "/alerts";

struct AlertWebhookOptions {
  // The bearer token requests must carry; empty only where the listener requires a client
  // certificate (--alert_tls_client_ca), which then is what authenticates Alertmanager.
  std::string token;
  AlertCaptureContext capture;
  AlertPolicyOptions policy;
};

// What the webhook needs of the orchestrator.
struct AlertCaptures {
  // CaptureOrchestrator::Start: the capture's id, or why it was refused.
  std::function<absl::StatusOr<std::string>(const v1::CaptureRequest& request)> start;
  // Whether the capture is still running (not DONE, FAILED or CANCELLED).
  std::function<bool(const std::string& capture_id)> is_running;
};

class AlertWebhook {
 public:
  // clock: absl::Now, or a test's.
  AlertWebhook(
      AlertWebhookOptions options, AlertCaptures captures,
      std::function<absl::Time()> clock = [] { return absl::Now(); });

  // The HTTP listener's handler.
  HttpResponse Handle(const HttpRequest& request);

  // Any thread: requests by result and alerts by decision, for /metrics.
  DaemonMetrics::Snapshot::Alerts counts() const;

 private:
  enum class RequestResult { kAccepted, kUnauthorized, kBadRequest, kNotFound, kMethodNotAllowed };
  static constexpr int kRequestResultCount = 5;

  bool Authorized(const HttpRequest& request) const;
  HttpResponse Answer(RequestResult result, int code, const char* reason, std::string text);
  // One alert of a notification: decides, starts the capture if allowed, logs and counts.
  struct Outcome {
    AlertDecision decision;
    std::string capture_id;
    std::string why;
  };
  Outcome Consider(const AlertmanagerNotification& notification, const AlertmanagerAlert& alert);
  void Record(const AlertmanagerNotification& notification, const AlertmanagerAlert& alert,
              const Outcome& outcome, const v1::CaptureRequest* request);

  const AlertWebhookOptions options_;
  const AlertCaptures captures_;
  const std::function<absl::Time()> clock_;
  AlertPolicy policy_;
  LogBudget refused_requests_log_;  // unauthenticated and malformed requests: anyone can send them
  std::array<std::atomic<uint64_t>, kRequestResultCount> requests_{};
  std::array<std::atomic<uint64_t>, kAlertDecisionCount> decisions_{};
};

}  // namespace profd::alerts
