#include "daemon/alerts/alert_capture_request.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "profd/v1/capture_limits.h"

namespace profd::alerts {
namespace {

// The label's value; "" when the target is off or the alert has no such label.
std::string LabelOf(const AlertmanagerAlert& alert, const std::string& label) {
  if (label.empty()) return "";
  auto it = alert.labels.find(label);
  return it == alert.labels.end() ? "" : it->second;
}

absl::Status BadAnnotation(const char* name, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrCat("annotation ", name, "=\"", value, "\": expected ", want));
}

absl::Status ApplyAnnotations(const AlertmanagerAlert& alert, const AlertCaptureContext& context,
                              absl::Time now, v1::CaptureRequest* request) {
  auto annotation = [&](const char* name) -> std::string {
    auto it = alert.annotations.find(name);
    return it == alert.annotations.end() ? "" : std::string(absl::StripAsciiWhitespace(it->second));
  };
  absl::Duration duration = context.default_duration;
  if (std::string text = annotation(kDurationAnnotation); !text.empty()) {
    if (!absl::ParseDuration(text, &duration) || duration <= absl::ZeroDuration()) {
      return BadAnnotation(kDurationAnnotation, text, "a duration over 0, such as 5s or 500ms");
    }
  }
  request->set_duration_ms(absl::ToInt64Milliseconds(duration));
  if (std::string text = annotation(kGpuMetricsAnnotation); !text.empty()) {
    bool on = false;
    if (!absl::SimpleAtob(text, &on)) {
      return BadAnnotation(kGpuMetricsAnnotation, text, "true or false");
    }
    request->set_gpu_metrics(on);
  }
  if (std::string text = annotation(kFormatAnnotation); !text.empty()) {
    if (text != "json" && text != "perfetto") {
      return BadAnnotation(kFormatAnnotation, text, "json or perfetto");
    }
    request->set_trace_format(text);
  }
  if (std::string text = annotation(kViaAnnotation); !text.empty()) {
    if (text == "kineto") {
      request->set_path(v1::CAPTURE_PATH_KINETO);
    } else if (text == "cupti") {
      request->set_path(v1::CAPTURE_PATH_CUPTI);
    } else if (text != "auto") {
      return BadAnnotation(kViaAnnotation, text, "auto, cupti or kineto");
    }
  }
  request->set_label(annotation(kLabelAnnotation));
  // The seconds before the alert fired: Alertmanager notifies after its group_wait, so the
  // capture reaches back to startsAt and this much before it.
  absl::Duration before = context.default_before;
  if (std::string text = annotation(kBeforeAnnotation); !text.empty()) {
    if (!absl::ParseDuration(text, &before) || before < absl::ZeroDuration()) {
      return BadAnnotation(kBeforeAnnotation, text, "a duration such as 10s, or 0s");
    }
  }
  if (before > absl::ZeroDuration()) {
    absl::Duration since_fired = now - alert.starts_at;
    if (since_fired < absl::ZeroDuration() || alert.starts_at == absl::InfinitePast()) {
      since_fired = absl::ZeroDuration();
    }
    before = std::min(before + since_fired, absl::Milliseconds(v1::kMaxBeforeMs));
    request->set_before_ms(absl::ToInt64Milliseconds(before));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AlertTargetLabels> ParseAlertTargetLabels(absl::string_view text) {
  AlertTargetLabels labels;
  for (absl::string_view entry :
       absl::StrSplit(absl::string_view(text), ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    const absl::string_view target = absl::StripAsciiWhitespace(parts[0]);
    std::string* out = target == "pid"         ? &labels.pid
                       : target == "pod"       ? &labels.pod
                       : target == "namespace" ? &labels.pod_namespace
                       : target == "node"      ? &labels.node
                       : target == "gpu"       ? &labels.gpu
                                               : nullptr;
    if (parts.size() != 2 || out == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--alert_target_labels: '", entry,
                       "' is not target=label with a target among pid, pod, namespace, node, gpu "
                       "(e.g. pod=kubernetes_pod_name,node=instance)"));
    }
    *out = std::string(absl::StripAsciiWhitespace(parts[1]));
  }
  return labels;
}

absl::StatusOr<v1::CaptureRequest> CaptureRequestForAlert(const AlertmanagerAlert& alert,
                                                          const AlertCaptureContext& context,
                                                          absl::Time now) {
  const AlertTargetLabels& names = context.labels;
  if (std::string node = LabelOf(alert, names.node); !node.empty() && node != context.node) {
    return absl::FailedPreconditionError(
        absl::StrCat("its label ", names.node, "=\"", node, "\" names another node than this one (",
                     context.node, "): route it to that node's profd"));
  }
  v1::CaptureRequest request;
  const std::string pid_text = LabelOf(alert, names.pid);
  const std::string gpu_text = LabelOf(alert, names.gpu);
  const std::string pod = LabelOf(alert, names.pod);
  const std::string pod_namespace = LabelOf(alert, names.pod_namespace);
  if (!pid_text.empty()) {
    uint32_t pid = 0;
    if (!absl::SimpleAtoi(pid_text, &pid) || pid == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("its label ", names.pid, "=\"", pid_text, "\" is not a process id"));
    }
    request.add_pids(pid);
  } else if (!gpu_text.empty()) {
    uint32_t gpu = 0;
    if (!absl::SimpleAtoi(gpu_text, &gpu)) {
      return absl::InvalidArgumentError(
          absl::StrCat("its label ", names.gpu, "=\"", gpu_text, "\" is not a GPU index"));
    }
    std::vector<uint32_t> pids = context.pids_on_gpu ? context.pids_on_gpu(gpu, pod_namespace, pod)
                                                     : std::vector<uint32_t>{};
    if (pids.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no process with an agent on GPU ", gpu,
          pod.empty()
              ? ""
              : absl::StrCat(" in pod ", pod_namespace.empty() ? "" : pod_namespace + "/", pod),
          " on ", context.node));
    }
    for (uint32_t pid : pids) request.add_pids(pid);
  } else if (!pod.empty()) {
    request.set_pod_name(pod);
    request.set_pod_namespace(pod_namespace);
  } else {
    std::vector<std::string> wanted;
    for (const std::string* label : {&names.pid, &names.gpu, &names.pod}) {
      if (!label->empty()) wanted.push_back(*label);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("it names no process: it has none of the labels ", absl::StrJoin(wanted, ", "),
                     " (--alert_target_labels maps them; keep them in the rule's `by (...)`)"));
  }
  if (absl::Status s = ApplyAnnotations(alert, context, now, &request); !s.ok()) return s;
  return request;
}

}  // namespace profd::alerts
