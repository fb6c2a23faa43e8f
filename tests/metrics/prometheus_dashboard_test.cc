// A real Prometheus (/usr/bin/prometheus, on a free loopback port, with the shipped
// deploy/prometheus/prometheus-static.yml and its rule files) scrapes a real profd with a real
// agent connected, and every PromQL expression of deploy/grafana/profd-dashboard.json (panels
// and variables) is asked through Prometheus' HTTP query API: a malformed expression fails the
// test through the API's error, and an expression without data fails it too — except, when
// profd_nvml_available is 0, expressions on NVML-sourced series, which have nothing to show on a
// host without a GPU, and the GPU hardware-counter series (CUPTI PM sampling needs a real GPU;
// tests/gpu/run_gpu_counters_prom.sh shows them). With the fake NVML library every other
// expression must return data.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "analysis/gpu_counters.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics/http_get.h"
#include "tests/metrics/prometheus_server.h"
#include "tests/metrics/wire_agent.h"
#include "tests/support/profd_process.h"

namespace profd::testing {
namespace {

using ::testing::HasSubstr;

// Series that only NVML fills (docs/METRICS.md, "Sources").
constexpr const char* kNvmlSeries[] = {"profd_gpu_", "profd_process_sm_utilization_ratio",
                                       "profd_process_gpu_memory_used_bytes",
                                       "profd_nvml_errors_total"};

struct Expression {
  std::string where;  // panel title / variable name, for messages
  std::string promql;
  bool nvml = false;
  bool counters = false;  // a GPU hardware-counter series (CUPTI PM sampling: needs a GPU)
  bool event = false;     // an annotation: data only when something happened (a capture)
};

// Every expression of the dashboard, with Grafana's variables as a user with "All" selected
// sees them.
std::vector<Expression> DashboardExpressions() {
  rapidjson::Document dashboard;
  dashboard.Parse(ReadFileOrEmpty(SourcePath("deploy/grafana/profd-dashboard.json")).c_str());
  EXPECT_FALSE(dashboard.HasParseError()) << "profd-dashboard.json is not JSON";
  std::vector<Expression> out;
  auto add = [&](std::string where, std::string expr) {
    expr = absl::StrReplaceAll(expr, {{"$__rate_interval", "1m"},
                                      {"$__range", "5m"},
                                      {"$hostname", ".*"},
                                      {"$namespace", ".*"},
                                      {"$pod", ".*"},
                                      {"$gpu", ".*"}});
    EXPECT_EQ(expr.find('$'), std::string::npos) << where << ": unknown variable in " << expr;
    Expression e{std::move(where), expr};
    for (const GpuCounterDef& def : GpuCounterDefs()) {
      e.counters |= expr.find(def.series) != std::string::npos;
    }
    for (const char* series : kNvmlSeries) {
      e.nvml |= !e.counters && expr.find(series) != std::string::npos;
    }
    out.push_back(std::move(e));
  };
  for (const auto& panel : dashboard["panels"].GetArray()) {
    if (!panel.HasMember("targets")) continue;
    for (const auto& target : panel["targets"].GetArray()) {
      add(panel["title"].GetString(), target["expr"].GetString());
    }
  }
  for (const auto& annotation : dashboard["annotations"]["list"].GetArray()) {
    add(absl::StrCat("annotation ", annotation["name"].GetString()),
        annotation["expr"].GetString());
    out.back().event = true;
  }
  // label_values(<selector>, <label>) is Grafana's; Prometheus answers the same question as
  // count by (<label>) (<selector>).
  for (const auto& variable : dashboard["templating"]["list"].GetArray()) {
    if (std::string(variable["type"].GetString()) != "query") continue;
    std::string q = variable["definition"].GetString();
    const std::string prefix = "label_values(";
    EXPECT_EQ(q.rfind(prefix, 0), 0u) << q;
    const size_t comma = q.rfind(',');
    std::string selector = q.substr(prefix.size(), comma - prefix.size());
    std::string label(absl::StripAsciiWhitespace(q.substr(comma + 1, q.size() - comma - 2)));
    add(absl::StrCat("variable ", variable["name"].GetString()),
        absl::StrCat("count by (", label, ") (", selector, ")"));
  }
  return out;
}

std::string MetricsAddress(const ProfdProcess& profd) {
  return profd.ProfctlJson({"status"})["metrics_address"].GetString();
}

v1::Hello WireHello() {
  v1::Hello hello;
  hello.set_agent_version("test");
  hello.set_pod_name("wire-pod");
  hello.set_pod_namespace("serving");
  hello.set_container_name("server");
  v1::DeviceInfo* d = hello.add_devices();
  d->set_ordinal(0);
  d->set_uuid("GPU-11111111-1111-1111-1111-111111111111");  // the fake NVML's GPU 1
  return hello;
}

// Asks every expression until each required one has data (rate() needs two scrapes). Returns
// how many were allowed to stay empty.
int ExpectDashboardHasData(const PrometheusServer& prometheus, bool nvml_required) {
  std::vector<Expression> expressions = DashboardExpressions();
  EXPECT_GE(expressions.size(), 20u);
  std::vector<std::string> empty;
  int exempt = 0;
  bool ok = WaitFor(
      [&] {
        empty.clear();
        exempt = 0;
        for (const Expression& e : expressions) {
          int n = prometheus.Count(e.promql);
          if (n < 0) return true;  // malformed: already a failure, stop waiting
          if (n > 0 || e.event) continue;
          // No GPU here: the hardware counters are never available (the test asserts it).
          if ((e.nvml && !nvml_required) || e.counters) {
            ++exempt;
            continue;
          }
          empty.push_back(e.where + ": " + e.promql);
        }
        return empty.empty();
      },
      absl::Seconds(30));
  EXPECT_TRUE(ok) << "dashboard expressions without data:\n  " << absl::StrJoin(empty, "\n  ")
                  << "\n"
                  << prometheus.log();
  return exempt;
}

class PrometheusDashboardTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("NODE_NAME", "node-test", 1); }
};

// What CI sees: no GPU, no NVML. The agent host's counters are empty (no CUDA), so a WireAgent
// provides the launch and memory counters the pod panels need.
TEST_F(PrometheusDashboardTest, EveryPanelAnswersWithoutNvmlAndExitedProcessesVanish) {
  ProfdProcess profd({"--nvml_library=/nonexistent/libnvidia-ml.so.1", "--gpu_counters"});
  profd.Start();
  auto host = StartAgentHost(profd.agent_socket(), {},
                             {{"POD_NAME", "llm-7f9c"}, {"POD_NAMESPACE", "serving"}});
  auto wire = std::make_unique<WireAgent>(profd.agent_socket(), WireHello(), 0, 6ull << 30);
  PrometheusServer prometheus(MetricsAddress(profd));

  ASSERT_TRUE(
      WaitFor([&] { return prometheus.Count("profd_nvml_available") == 1; }, absl::Seconds(15)))
      << prometheus.log();
  ASSERT_EQ(prometheus.Value("profd_nvml_available"), 0);
  // --gpu_counters without a GPU: profd goes on, and the gauge says the counters are off.
  EXPECT_TRUE(WaitFor([&] { return prometheus.Count("profd_gpu_counters_available") == 1; },
                      absl::Seconds(10)));
  EXPECT_EQ(prometheus.Value("profd_gpu_counters_available"), 0);
  // And `profctl status` says so, with the reason.
  RunResult status = profd.Profctl({"status"});
  EXPECT_NE(status.out.find("GPU metrics:       off: cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << status.out;
  EXPECT_NE(status.out.find("GPU counters:      /metrics; unavailable: "), std::string::npos)
      << status.out;
  const int exempt = ExpectDashboardHasData(prometheus, /*nvml_required=*/false);
  EXPECT_GT(exempt, 0);  // the GPU panels are there, and empty here
  EXPECT_EQ(prometheus.Value("profd_agents_connected"), 2);
  // The recording rules run on their own 1 s cycle, a step behind the scrapes.
  EXPECT_TRUE(WaitFor(
      [&] { return prometheus.Value("profd:pod_kernel_launches:rate1m{pod=\"wire-pod\"}") > 0; },
      absl::Seconds(10)));
  EXPECT_EQ(prometheus.Value("profd:pod_memory_allocated_peak_bytes:sum{pod=\"wire-pod\"}"),
            6.0 * (1ull << 30));

  // The processes go: their series leave Prometheus at the next scrape (staleness), not 5 min on.
  const std::string host_pid = absl::StrCat("{pid=\"", host->pid(), "\"}");
  const std::string wire_pid = absl::StrCat("{pid=\"", getpid(), "\"}");
  ASSERT_EQ(prometheus.Count("profd_process_info" + host_pid), 1);
  ASSERT_EQ(prometheus.Count("profd_process_kernel_launches_total" + wire_pid), 1);
  host->Kill();
  wire.reset();
  EXPECT_TRUE(WaitFor(
      [&] {
        return prometheus.Count("profd_process_info" + host_pid) == 0 &&
               prometheus.Count("profd_process_info" + wire_pid) == 0 &&
               prometheus.Count("profd_process_kernel_launches_total" + wire_pid) == 0 &&
               prometheus.Count("profd_process_memory_allocated_peak_bytes" + wire_pid) == 0;
      },
      absl::Seconds(10)))
      << prometheus.log();
  EXPECT_EQ(prometheus.Value("profd_agents_connected"), 0);
}

// With NVML (the fake library standing in for the driver) nothing may be empty.
TEST_F(PrometheusDashboardTest, EveryPanelHasDataWithNvml) {
  TempDir dir;
  const std::string pids_file = dir.File("nvml_pids");
  setenv("FAKE_NVML_PIDS_FILE", pids_file.c_str(), 1);
  ProfdProcess profd({"--nvml_library=" + BuildPath("tests/metrics/libfake_nvml.so"),
                      "--nvml_sample_interval=200ms", "--gpu_counters"});
  profd.Start();
  auto host = StartAgentHost(profd.agent_socket(), {},
                             {{"POD_NAME", "llm-7f9c"}, {"POD_NAMESPACE", "serving"}});
  WireAgent wire(profd.agent_socket(), WireHello(), 0, 6ull << 30);
  std::ofstream(pids_file) << host->pid() << " 1\n" << getpid() << " 1\n";
  PrometheusServer prometheus(MetricsAddress(profd));

  // Only the hardware-counter panels may be empty: no GPU here for CUPTI's PM sampling.
  const std::vector<Expression> expressions = DashboardExpressions();
  const auto counters = std::count_if(expressions.begin(), expressions.end(),
                                      [](const Expression& e) { return e.counters; });
  EXPECT_GE(counters, 9);
  EXPECT_EQ(ExpectDashboardHasData(prometheus, /*nvml_required=*/true), counters);
  EXPECT_EQ(prometheus.Value("profd_nvml_available"), 1);
  // The wire agent's CUDA device 0 is the fake's GPU 1 (same uuid): one `gpu` for both sources.
  const std::string wire_gpu = absl::StrCat("{pid=\"", getpid(), "\",gpu=\"1\"}");
  EXPECT_EQ(prometheus.Count("profd_process_kernel_launches_total" + wire_gpu), 1);
  EXPECT_EQ(prometheus.Count("profd_process_sm_utilization_ratio" + wire_gpu), 1);
  EXPECT_TRUE(WaitFor(
      [&] {
        return prometheus.Value("profd:pod_sm_utilization:ratio{pod=\"llm-7f9c\",gpu=\"1\"}") ==
               0.25;
      },
      absl::Seconds(10)));
}

// The upload series count what the spool did: a capture stored moves them (and the dashboard's
// upload panels), where before they stayed at zero and ProfdUploadsFailing could never fire.
TEST_F(PrometheusDashboardTest, UploadSeriesMoveWhenCapturesAreStored) {
  ProfdProcess profd({"--nvml_library=/nonexistent/libnvidia-ml.so.1"});
  profd.Start();
  Subprocess agent({BuildPath("tests/integration/replay_agent"),
                    SourcePath("tests/fixtures/burst_1000_kernels.batches.pb")},
                   {{"PROFD_AGENT_SOCKET", profd.agent_socket()}});
  PrometheusServer prometheus(MetricsAddress(profd));
  ASSERT_TRUE(
      WaitFor([&] { return prometheus.Value("profd_uploads_total{result=\"succeeded\"}") == 0; },
              absl::Seconds(15)))
      << prometheus.log();
  ASSERT_TRUE(WaitFor(
      [&] {
        return profd
                   .Profctl(
                       {"capture", "--pid", std::to_string(agent.pid()), "--duration", "300ms"})
                   .exit_code == 0;
      },
      absl::Seconds(10)));
  rapidjson::Document stored = profd.ProfctlJson({"list"});
  ASSERT_EQ(stored["traces"].Size(), 1u);
  const double bytes = std::stod(stored["traces"][0]["bytes"].GetString());
  EXPECT_TRUE(WaitFor(
      [&] {
        return prometheus.Value("profd_uploads_total{result=\"succeeded\"}") == 1 &&
               prometheus.Value("profd_trace_uploaded_bytes_total") == bytes;
      },
      absl::Seconds(15)))
      << "uploads " << prometheus.Value("profd_uploads_total{result=\"succeeded\"}") << ", bytes "
      << prometheus.Value("profd_trace_uploaded_bytes_total") << " (want " << bytes << ")";
  EXPECT_EQ(prometheus.Value("profd_uploads_total{result=\"failed\"}"), 0);
  // The dashboard marks the capture: one annotation series, this node's, result succeeded.
  int annotations = 0;
  for (const Expression& e : DashboardExpressions()) {
    if (!e.event) continue;
    ++annotations;
    EXPECT_TRUE(WaitFor([&] { return prometheus.Count(e.promql) == 1; }, absl::Seconds(15)))
        << e.where << ": " << e.promql << " has " << prometheus.Count(e.promql) << " series";
    EXPECT_EQ(prometheus.Count(absl::StrCat("(", e.promql, ") and on (result) ",
                                            "profd_captures_total{result=\"succeeded\"}")),
              1);
  }
  EXPECT_EQ(annotations, 1);
}

// Every panel whose series are a pod's links to the gateway's capture page for that pod
// (tests/integration/gateway_test opens the link in Chromium): the query keeps the namespace and
// pod labels the link takes, and the link's base is the dashboard's gateway variable.
TEST(PrometheusDashboardLinks, PerPodPanelsLinkToTheGatewayCapturePage) {
  rapidjson::Document dashboard;
  dashboard.Parse(ReadFileOrEmpty(SourcePath("deploy/grafana/profd-dashboard.json")).c_str());
  ASSERT_FALSE(dashboard.HasParseError());
  bool variable = false;
  for (const auto& v : dashboard["templating"]["list"].GetArray()) {
    variable |= std::string(v["name"].GetString()) == "gateway" &&
                std::string(v["type"].GetString()) == "textbox";
  }
  EXPECT_TRUE(variable) << "no textbox variable gateway";
  int linked = 0;
  for (const auto& panel : dashboard["panels"].GetArray()) {
    const std::string title = panel["title"].GetString();
    if (title.find("per pod") == std::string::npos) continue;
    for (const auto& target : panel["targets"].GetArray()) {
      const std::string expr = target["expr"].GetString();
      EXPECT_NE(expr.find("namespace, pod"), std::string::npos) << title << ": " << expr;
    }
    ASSERT_TRUE(panel["fieldConfig"]["defaults"].HasMember("links")) << title;
    const auto& link = panel["fieldConfig"]["defaults"]["links"][0];
    EXPECT_STREQ(link["title"].GetString(), "Capture this pod for 5 s") << title;
    EXPECT_STREQ(link["url"].GetString(),
                 "${gateway}/capture?namespace=${__field.labels.namespace:percentencode}"
                 "&pod=${__field.labels.pod:percentencode}&duration=5s&start=1")
        << title;
    ++linked;
  }
  EXPECT_EQ(linked, 3);
}

}  // namespace
}  // namespace profd::testing
