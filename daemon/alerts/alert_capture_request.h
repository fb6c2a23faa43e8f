// What an alert asks profd to capture: its labels name the processes (through a mapping, since
// rules and relabelling name them differently), its annotations choose the capture's options.
// The result is the same CaptureRequest `profctl capture` sends, so an alert's capture takes the
// same path through CaptureOrchestrator as a person's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/alerts/alertmanager_notification.h"
#include "profd/v1/profd.pb.h"

namespace profd::alerts {

// The alert label that carries each part of a target (--alert_target_labels): by default the
// labels of profd's own series, whose `hostname` is the node (NODE_NAME, else the host name).
struct AlertTargetLabels {
  std::string pid = "pid";
  std::string pod = "pod";
  std::string pod_namespace = "namespace";
  std::string node = "hostname";
  std::string gpu = "gpu";
};

// "target=label,..." with targets pid, pod, namespace, node, gpu; targets not named keep their
// default label; an empty label turns that target off. INVALID_ARGUMENT saying which entry is
// wrong and what is expected.
absl::StatusOr<AlertTargetLabels> ParseAlertTargetLabels(absl::string_view text);

// The annotations an alert's rule may set (docs/ALERTS.md).
inline constexpr char kDurationAnnotation[] = "profd_capture_duration";
inline constexpr char kGpuMetricsAnnotation[] = "profd_capture_gpu_metrics";
inline constexpr char kFormatAnnotation[] = "profd_capture_format";
inline constexpr char kViaAnnotation[] = "profd_capture_via";
inline constexpr char kLabelAnnotation[] = "profd_capture_label";
inline constexpr char kBeforeAnnotation[] = "profd_capture_before";

struct AlertCaptureContext {
  AlertTargetLabels labels;
  std::string node;  // this profd's node name (NODE_NAME, else the host name)
  absl::Duration default_duration = absl::Seconds(5);  // without profd_capture_duration
  // How long before the alert fired (its startsAt) the capture begins, with what each process's
  // flight recorder kept; without profd_capture_before. 0: not before the request.
  absl::Duration default_before = absl::Seconds(10);
  // The pids of the processes on GPU `gpu` (the `gpu` label of /metrics), of the pod when
  // pod is not empty (namespace too when not empty).
  std::function<std::vector<uint32_t>(uint32_t gpu, const std::string& pod_namespace,
                                      const std::string& pod)>
      pids_on_gpu;
};

// The capture the alert names. Its targets, most precise first: the pid label; else the GPU
// label (its processes, within the pod when the alert names one too); else the pod (within
// the namespace when named). Errors, each saying what the alert lacked or held:
// FAILED_PRECONDITION for an alert whose node label names another node, INVALID_ARGUMENT for no
// target label or a malformed label or annotation, NOT_FOUND for a GPU without processes.
// now: when the notification came (the time before the alert is counted from its startsAt).
absl::StatusOr<v1::CaptureRequest> CaptureRequestForAlert(const AlertmanagerAlert& alert,
                                                          const AlertCaptureContext& context,
                                                          absl::Time now = absl::Now());

}  // namespace profd::alerts
