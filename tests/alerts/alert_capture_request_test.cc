// Which processes an alert names (its labels through --alert_target_labels) and how they are
// captured (its annotations), and the message for each alert profd cannot act on.
#include "daemon/alerts/alert_capture_request.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace profd::alerts {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

AlertmanagerAlert Alert(std::map<std::string, std::string> labels,
                        std::map<std::string, std::string> annotations = {}) {
  AlertmanagerAlert a;
  a.firing = true;
  a.labels = std::move(labels);
  a.labels["alertname"] = "ProfdKernelLaunchRateCollapsed";
  a.annotations = std::move(annotations);
  return a;
}

AlertCaptureContext Context() {
  AlertCaptureContext c;
  c.node = "node-7";
  c.default_duration = absl::Seconds(5);
  // GPU 1 holds pids 10 (pod a) and 11 (pod b); GPU 0 nothing.
  c.pids_on_gpu = [](uint32_t gpu, const std::string&, const std::string& pod) {
    std::vector<uint32_t> pids;
    if (gpu == 1 && (pod.empty() || pod == "a")) pids.push_back(10);
    if (gpu == 1 && (pod.empty() || pod == "b")) pids.push_back(11);
    return pids;
  };
  return c;
}

TEST(AlertTargetLabelsTest, DefaultsAreProfdsOwnLabelsAndEachCanBeRenamedOrTurnedOff) {
  absl::StatusOr<AlertTargetLabels> d = ParseAlertTargetLabels("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->pid, "pid");
  EXPECT_EQ(d->pod, "pod");
  EXPECT_EQ(d->pod_namespace, "namespace");
  EXPECT_EQ(d->node, "hostname");
  EXPECT_EQ(d->gpu, "gpu");
  absl::StatusOr<AlertTargetLabels> k = ParseAlertTargetLabels(
      " pod=kubernetes_pod_name, namespace=kubernetes_namespace,node=,gpu=dev");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->pod, "kubernetes_pod_name");
  EXPECT_EQ(k->pod_namespace, "kubernetes_namespace");
  EXPECT_EQ(k->node, "");
  EXPECT_EQ(k->gpu, "dev");
  EXPECT_EQ(k->pid, "pid");
  for (const char* bad : {"container=c", "pod", "pid:process"}) {
    absl::StatusOr<AlertTargetLabels> r = ParseAlertTargetLabels(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(
        r.status().message(),
        HasSubstr("is not target=label with a target among pid, pod, namespace, node, gpu"));
  }
}

TEST(AlertCaptureRequestTest, MostPreciseTargetWins) {
  AlertCaptureContext c = Context();
  absl::StatusOr<v1::CaptureRequest> pid =
      CaptureRequestForAlert(Alert({{"pid", "4242"}, {"pod", "a"}, {"gpu", "1"}}), c);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_THAT(pid->pids(), ElementsAre(4242u));
  EXPECT_EQ(pid->pod_name(), "");
  EXPECT_EQ(pid->duration_ms(), 5000);

  absl::StatusOr<v1::CaptureRequest> gpu = CaptureRequestForAlert(Alert({{"gpu", "1"}}), c);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_THAT(gpu->pids(), ElementsAre(10u, 11u));
  absl::StatusOr<v1::CaptureRequest> gpu_pod =
      CaptureRequestForAlert(Alert({{"gpu", "1"}, {"pod", "b"}}), c);
  ASSERT_TRUE(gpu_pod.ok());
  EXPECT_THAT(gpu_pod->pids(), ElementsAre(11u));

  absl::StatusOr<v1::CaptureRequest> pod =
      CaptureRequestForAlert(Alert({{"pod", "llm-7f9c"}, {"namespace", "serving"}}), c);
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(pod->pod_name(), "llm-7f9c");
  EXPECT_EQ(pod->pod_namespace(), "serving");
  EXPECT_TRUE(pod->pids().empty());
}

TEST(AlertCaptureRequestTest, MappedLabelsNameTheTargets) {
  AlertCaptureContext c = Context();
  c.labels = *ParseAlertTargetLabels("pod=kubernetes_pod_name,node=instance,pid=");
  absl::StatusOr<v1::CaptureRequest> r = CaptureRequestForAlert(
      Alert({{"kubernetes_pod_name", "llm"}, {"instance", "node-7"}, {"pid", "1"}}), c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pod_name(), "llm");
  EXPECT_TRUE(r->pids().empty());  // the pid target is off
  absl::StatusOr<v1::CaptureRequest> other =
      CaptureRequestForAlert(Alert({{"kubernetes_pod_name", "llm"}, {"instance", "node-8"}}), c);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(),
              HasSubstr("its label instance=\"node-8\" names another node than this one (node-7)"));
}

TEST(AlertCaptureRequestTest, AlertsProfdCannotActOnSayWhy) {
  AlertCaptureContext c = Context();
  auto error = [&](const AlertmanagerAlert& alert) {
    absl::StatusOr<v1::CaptureRequest> r = CaptureRequestForAlert(alert, c);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_THAT(error(Alert({{"namespace", "serving"}, {"severity", "page"}})),
              HasSubstr("it names no process: it has none of the labels pid, gpu, pod"));
  EXPECT_THAT(error(Alert({{"pid", "12x"}})),
              HasSubstr("its label pid=\"12x\" is not a process id"));
  EXPECT_THAT(error(Alert({{"gpu", "first"}})),
              HasSubstr("its label gpu=\"first\" is not a GPU index"));
  EXPECT_THAT(error(Alert({{"gpu", "0"}})),
              HasSubstr("no process with an agent on GPU 0 on node-7"));
  EXPECT_THAT(error(Alert({{"hostname", "node-9"}, {"pid", "1"}})),
              HasSubstr("names another node than this one (node-7)"));
  EXPECT_THAT(error(Alert({{"pid", "1"}}, {{kDurationAnnotation, "5 seconds"}})),
              HasSubstr("annotation profd_capture_duration=\"5 seconds\": expected a duration"));
  EXPECT_THAT(error(Alert({{"pid", "1"}}, {{kDurationAnnotation, "-1s"}})),
              HasSubstr("expected a duration over 0"));
  EXPECT_THAT(error(Alert({{"pid", "1"}}, {{kGpuMetricsAnnotation, "maybe"}})),
              HasSubstr("annotation profd_capture_gpu_metrics=\"maybe\": expected true or false"));
  EXPECT_THAT(error(Alert({{"pid", "1"}}, {{kFormatAnnotation, "nsys"}})),
              HasSubstr("expected json or perfetto"));
  EXPECT_THAT(error(Alert({{"pid", "1"}}, {{kViaAnnotation, "nvtx"}})),
              HasSubstr("expected auto, cupti or kineto"));
}

TEST(AlertCaptureRequestTest, AnnotationsChooseTheCapture) {
  absl::StatusOr<v1::CaptureRequest> r = CaptureRequestForAlert(
      Alert({{"pid", "7"}, {"hostname", "node-7"}}, {{kDurationAnnotation, " 1500ms "},
                                                     {kGpuMetricsAnnotation, "true"},
                                                     {kFormatAnnotation, "perfetto"},
                                                     {kViaAnnotation, "kineto"},
                                                     {kLabelAnnotation, "slow step"}}),
      Context());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->duration_ms(), 1500);
  EXPECT_TRUE(r->gpu_metrics());
  EXPECT_EQ(r->trace_format(), "perfetto");
  EXPECT_EQ(r->path(), v1::CAPTURE_PATH_KINETO);
  EXPECT_EQ(r->label(), "slow step");
}

}  // namespace
}  // namespace profd::alerts
