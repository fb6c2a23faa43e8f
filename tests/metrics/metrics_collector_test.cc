// MetricsCollector: synthetic agents in a real AgentRegistry, a GpuSnapshot as the sampler would
// publish it, real DaemonMetrics; checks the exact exposition text, labels included, and that
// series of processes that leave vanish.
#include "daemon/metrics/metrics_collector.h"

#include <cmath>
#include <fstream>

#include "absl/time/clock.h"
#include "analysis/gpu_counters.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint32_t kPid = 4000001;  // no such process: comm from /proc stays empty
constexpr char kUuid3[] = "GPU-33333333-3333-3333-3333-333333333333";

v1::Hello Hello(const std::string& pod, std::vector<std::pair<uint32_t, std::string>> devices) {
  v1::Hello hello;
  hello.set_agent_version("0.1.0");
  hello.set_pod_name(pod);
  hello.set_pod_namespace("serving");
  hello.set_container_name("vllm");
  hello.set_injected(true);
  for (const auto& [ordinal, uuid] : devices) {
    v1::DeviceInfo* d = hello.add_devices();
    d->set_ordinal(ordinal);
    d->set_uuid(uuid);
  }
  return hello;
}

v1::Heartbeat Counters(uint32_t device, uint64_t launches, uint64_t graphs, uint64_t allocated,
                       uint64_t peak) {
  v1::Heartbeat hb;
  v1::DeviceCounters* c = hb.add_devices();
  c->set_device(device);
  c->set_kernel_launches(launches);
  c->set_graph_launches(graphs);
  c->set_memory_allocated_bytes(allocated);
  c->set_memory_peak_bytes(peak);
  return hb;
}

GpuSnapshot TwoGpus(bool with_process) {
  GpuSnapshot s;
  s.nvml_available = true;
  for (uint32_t i : {2u, 3u}) {
    GpuSample g;
    g.index = i;
    g.uuid = i == 3 ? kUuid3 : "GPU-22222222-2222-2222-2222-222222222222";
    g.model = "NVIDIA H100 80GB HBM3";
    g.utilization = 0.37;
    g.memory_bandwidth_utilization = 0.12;
    if (i == 3) {  // GPU 2 as where nvmlDeviceGetSamples is missing: no busy-seconds counters
      g.busy_seconds_total = 1234.5;
      g.memory_bandwidth_busy_seconds_total = 456.25;
    }
    g.memory_used_bytes = 10ull << 30;
    g.memory_total_bytes = 80ull << 30;
    if (i == 3 && with_process) {
      GpuProcessSample p;
      p.pid = kPid;
      p.comm = "ignored-when-agent-known";
      p.memory_used_bytes = 3ull << 30;
      p.sm_utilization = 0.25;
      g.processes.push_back(p);
      GpuProcessSample other;  // a process without an agent
      other.pid = 4000002;
      other.comm = "python3";
      other.memory_used_bytes = 1ull << 30;
      g.processes.push_back(other);
    }
    s.gpus.push_back(g);
  }
  s.errors_by_call["nvmlDeviceGetProcessUtilization"] = 2;
  return s;
}

class MetricsCollectorTest : public ::testing::Test {
 protected:
  MetricsCollectorTest()
      : gpus_(GpuSampler::Options{}),
        collector_(MetricsCollector::Sources{
            "node-a",
            &registry_,
            &gpus_,
            &daemon_,
            [] {
              AgentChannelCounters c;
              c.closed_for_cause[static_cast<int>(AgentViolation::kFrameTooLarge)] = 7;
              c.rejected[static_cast<int>(AgentRejection::kUidShare)] = 2;
              c.connections = 3;
              c.paused = 1;
              c.buffered_bytes = 65536;
              c.backlog_bytes = 1048576;
              return c;
            },
            {}}) {}

  std::string Scrape() { return prometheus::TextSerializer().Serialize(collector_.Collect()); }

  AgentRegistry registry_;
  GpuSampler gpus_;  // never started: snapshots come from PublishForTesting
  DaemonMetrics daemon_;
  MetricsCollector collector_;
};

// The expected line, whole: "\n<line>\n" so that a prefix of a longer line does not match.
::testing::Matcher<std::string> Line(const std::string& line) {
  return HasSubstr("\n" + line + "\n");
}

// How each agent counts is on its info series; the CUPTI route also says when it steps aside for
// the process's own profiler. Older agents that sampled keep their label.
TEST_F(MetricsCollectorTest, LaunchCountingRouteAndPausedCountersAreShown) {
  gpus_.PublishForTesting(TwoGpus(/*with_process=*/false));
  registry_.Register(1, kPid, 1000, Hello("entry", {{0, kUuid3}}), absl::Now());
  v1::Heartbeat entry = Counters(0, 10, 0, 0, 0);
  entry.set_launch_counting(v1::LAUNCH_COUNTING_ENTRY_POINTS);
  entry.set_launch_sample_every(1);
  registry_.Heartbeat(1, entry, absl::Now());
  registry_.Register(2, kPid + 1, 1000, Hello("cupti", {{0, kUuid3}}), absl::Now());
  v1::Heartbeat cupti = Counters(0, 10, 0, 0, 0);
  cupti.set_launch_counting(v1::LAUNCH_COUNTING_CUPTI);
  cupti.set_counters_paused(true);
  registry_.Heartbeat(2, cupti, absl::Now());
  registry_.Register(3, kPid + 2, 1000, Hello("old", {{0, kUuid3}}), absl::Now());
  v1::Heartbeat old = Counters(0, 10, 0, 0, 0);
  old.set_launch_sample_every(10);
  registry_.Heartbeat(3, old, absl::Now());

  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("pod=\"entry\",agent_version=\"0.1.0\",injected=\"true\","
                              "launch_counting=\"entry-points\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pod=\"cupti\",agent_version=\"0.1.0\",injected=\"true\","
                              "launch_counting=\"cupti\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pod=\"old\",agent_version=\"0.1.0\",injected=\"true\","
                              "launch_counting=\"sampled-1/10\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("profd_process_counters_paused{comm=\"\",container=\"vllm\","
                              "hostname=\"node-a\",namespace=\"serving\",pid=\"4000002\","
                              "pod=\"cupti\"} 1\n"));
  // Only the CUPTI route can pause.
  EXPECT_THAT(text, Not(HasSubstr("profd_process_counters_paused{comm=\"\",container=\"vllm\","
                                  "hostname=\"node-a\",namespace=\"serving\",pid=\"4000001\"")));
}

TEST_F(MetricsCollectorTest, AgentCountersCarryProcessAndGpuLabels) {
  gpus_.PublishForTesting(TwoGpus(/*with_process=*/true));
  // CUDA ordinal 0 in the process is the GPU NVML calls 3 (CUDA_VISIBLE_DEVICES=3).
  registry_.Register(1, kPid, 1000, Hello("llm-7f9c", {{0, kUuid3}}), absl::Now());
  registry_.Heartbeat(1, Counters(0, 12345, 67, 5ull << 30, 7ull << 30), absl::Now());
  // An agent whose device NVML does not know keeps its CUDA ordinal as `gpu`.
  registry_.Register(2, kPid + 10, 1000, Hello("other", {{1, "GPU-unknown"}}), absl::Now());
  registry_.Heartbeat(2, Counters(1, 5, 0, 0, 0), absl::Now());

  const std::string text = Scrape();
  const std::string process =
      "comm=\"\",container=\"vllm\",hostname=\"node-a\",namespace=\"serving\",pid=\"4000001\","
      "pod=\"llm-7f9c\"";
  const std::string on_gpu3 = process + ",gpu=\"3\"";
  EXPECT_THAT(text, Line("profd_process_kernel_launches_total{" + on_gpu3 + "} 12345"));
  EXPECT_THAT(text, Line("profd_process_graph_launches_total{" + on_gpu3 + "} 67"));
  EXPECT_THAT(text, Line("profd_process_memory_allocated_bytes{" + on_gpu3 + "} 5368709120"));
  EXPECT_THAT(text, Line("profd_process_memory_allocated_peak_bytes{" + on_gpu3 + "} 7516192768"));
  EXPECT_THAT(text, Line("profd_process_info{" + process +
                         ",agent_version=\"0.1.0\",injected=\"true\",launch_counting=\"off\"} 1"));
  EXPECT_THAT(text, HasSubstr("profd_process_kernel_launches_total{comm=\"\",container=\"vllm\","
                              "hostname=\"node-a\",namespace=\"serving\",pid=\"4000011\","
                              "pod=\"other\",gpu=\"1\"} 5\n"));
  EXPECT_THAT(text, Line("profd_agents_connected{hostname=\"node-a\"} 2"));
  EXPECT_THAT(text, Line("# TYPE profd_process_kernel_launches_total counter"));
  EXPECT_THAT(text, Line("# TYPE profd_process_memory_allocated_peak_bytes gauge"));

  // NVML's view of the same process takes its pod labels from the agent...
  EXPECT_THAT(text, Line("profd_process_gpu_memory_used_bytes{" + on_gpu3 + "} 3221225472"));
  EXPECT_THAT(text, Line("profd_process_sm_utilization_ratio{" + on_gpu3 + "} 0.25"));
  // ...and a process without an agent is still shown, with its comm from /proc.
  EXPECT_THAT(text, Line("profd_process_gpu_memory_used_bytes{comm=\"python3\",container=\"\","
                         "hostname=\"node-a\",namespace=\"\",pid=\"4000002\",pod=\"\",gpu=\"3\"} "
                         "1073741824"));
  // No SM sample for it: left out rather than a made-up 0.
  EXPECT_THAT(text, Not(HasSubstr("profd_process_sm_utilization_ratio{comm=\"python3\"")));
}

TEST_F(MetricsCollectorTest, GpuSeriesAndNvmlHealth) {
  gpus_.PublishForTesting(TwoGpus(false));
  const std::string text = Scrape();
  const std::string gpu3 = "gpu=\"3\",hostname=\"node-a\",model=\"NVIDIA H100 80GB HBM3\",uuid=\"" +
                           std::string(kUuid3) + "\"";
  EXPECT_THAT(text, Line("profd_gpu_utilization_ratio{" + gpu3 + "} 0.37"));
  EXPECT_THAT(text, Line("profd_gpu_memory_bandwidth_utilization_ratio{" + gpu3 + "} 0.12"));
  EXPECT_THAT(text, Line("profd_gpu_busy_seconds_total{" + gpu3 + "} 1234.5"));
  EXPECT_THAT(text, Line("profd_gpu_memory_bandwidth_busy_seconds_total{" + gpu3 + "} 456.25"));
  EXPECT_THAT(text, Not(HasSubstr("profd_gpu_busy_seconds_total{gpu=\"2\"")));
  EXPECT_THAT(text, HasSubstr("# TYPE profd_gpu_busy_seconds_total counter"));
  EXPECT_THAT(text, Line("profd_gpu_memory_used_bytes{" + gpu3 + "} 10737418240"));
  EXPECT_THAT(text, Line("profd_gpu_memory_total_bytes{" + gpu3 + "} 85899345920"));
  EXPECT_THAT(text, Line("profd_nvml_available{hostname=\"node-a\"} 1"));
  EXPECT_THAT(text, Line("profd_nvml_errors_total{hostname=\"node-a\","
                         "call=\"nvmlDeviceGetProcessUtilization\"} 2"));
  // The agent channel: every reason present, counted or 0.
  EXPECT_THAT(text, Line("profd_agent_protocol_errors_total{hostname=\"node-a\","
                         "reason=\"frame_too_large\"} 7"));
  EXPECT_THAT(text, Line("profd_agent_protocol_errors_total{hostname=\"node-a\","
                         "reason=\"peer_exited\"} 0"));
  EXPECT_THAT(text, Line("profd_agent_connections_rejected_total{hostname=\"node-a\","
                         "reason=\"uid_share\"} 2"));
  EXPECT_THAT(text, Line("profd_agent_connections_rejected_total{hostname=\"node-a\","
                         "reason=\"max_connections\"} 0"));
  EXPECT_THAT(text, Line("profd_agent_connections{hostname=\"node-a\"} 3"));
  EXPECT_THAT(text, Line("profd_agent_connections_paused{hostname=\"node-a\"} 1"));
  EXPECT_THAT(text, Line("profd_agent_buffered_bytes{hostname=\"node-a\"} 65536"));
  EXPECT_THAT(text, Line("profd_agent_backlog_bytes{hostname=\"node-a\"} 1048576"));
  // No agents: no process families at all, not even their HELP lines.
  EXPECT_THAT(text, Not(HasSubstr("profd_process_")));
}

TEST_F(MetricsCollectorTest, WithoutNvmlOnlyTheAvailabilityGaugeSaysSo) {
  GpuSnapshot none;
  none.nvml_error = "cannot load libnvidia-ml.so.1";
  gpus_.PublishForTesting(none);
  const std::string text = Scrape();
  EXPECT_THAT(text, Line("profd_nvml_available{hostname=\"node-a\"} 0"));
  EXPECT_THAT(text, Not(HasSubstr("profd_gpu_")));
  EXPECT_THAT(text, Not(HasSubstr("profd_nvml_errors_total")));
}

TEST_F(MetricsCollectorTest, SeriesOfProcessesThatLeaveVanish) {
  gpus_.PublishForTesting(TwoGpus(true));
  registry_.Register(1, kPid, 1000, Hello("llm-7f9c", {{0, kUuid3}}), absl::Now());
  registry_.Heartbeat(1, Counters(0, 1, 0, 0, 0), absl::Now());
  registry_.Register(2, kPid + 5, 1000, Hello("stays", {{0, kUuid3}}), absl::Now());
  registry_.Heartbeat(2, Counters(0, 1, 0, 0, 0), absl::Now());
  ASSERT_THAT(Scrape(), HasSubstr("pid=\"4000001\""));

  registry_.Unregister(1);
  gpus_.PublishForTesting(TwoGpus(false));  // NVML no longer lists it either
  const std::string text = Scrape();
  EXPECT_THAT(text, Not(HasSubstr("pid=\"4000001\"")));
  EXPECT_THAT(text, Not(HasSubstr("pid=\"4000002\"")));
  EXPECT_THAT(text, HasSubstr("pod=\"stays\""));
  EXPECT_THAT(text, Line("profd_agents_connected{hostname=\"node-a\"} 1"));
}

TEST_F(MetricsCollectorTest, CaptureAndUploadHealth) {
  daemon_.OnCaptureStarted();
  daemon_.OnCaptureStarted();
  daemon_.OnCaptureStarted();
  daemon_.OnCaptureFinished(CaptureResult::kSucceeded, absl::Seconds(2), 1000, 3, 5000);
  daemon_.OnCaptureFinished(CaptureResult::kFailed, absl::Milliseconds(50), 0, 0, 0);
  // The spool's own counts, read on each scrape.
  daemon_.SetUploadSource([] { return DaemonMetrics::Uploads{1, 1, 4000, 3, 2}; });
  daemon_.OnTraceBytesWritten(100);
  const std::string text = Scrape();
  const std::string h = "hostname=\"node-a\"";
  EXPECT_THAT(text, Line("profd_captures_total{" + h + ",result=\"succeeded\"} 1"));
  EXPECT_THAT(text, Line("profd_captures_total{" + h + ",result=\"failed\"} 1"));
  EXPECT_THAT(text, Line("profd_captures_total{" + h + ",result=\"cancelled\"} 0"));
  EXPECT_THAT(text, Line("profd_captures_running{" + h + "} 1"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"0.1\"} 1"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"1\"} 1"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"2.5\"} 2"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"+Inf\"} 2"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_count{" + h + "} 2"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_sum{" + h + "} 2.05"));
  EXPECT_THAT(text, Line("profd_capture_events_total{" + h + "} 1000"));
  EXPECT_THAT(text, Line("profd_capture_dropped_records_total{" + h + "} 3"));
  EXPECT_THAT(text, Line("profd_trace_written_bytes_total{" + h + "} 5100"));
  EXPECT_THAT(text, Line("profd_trace_uploaded_bytes_total{" + h + "} 4000"));
  EXPECT_THAT(text, Line("profd_uploads_total{" + h + ",result=\"succeeded\"} 1"));
  EXPECT_THAT(text, Line("profd_uploads_total{" + h + ",result=\"failed\"} 1"));
  // Captures the spool could not take: each failed attempt, and those still waiting.
  EXPECT_THAT(text, Line("profd_spool_write_failures_total{" + h + "} 3"));
  EXPECT_THAT(text, Line("profd_spool_captures_waiting_for_room{" + h + "} 2"));
}

// Retention's counts, read on each scrape, one series per place where it runs.
TEST_F(MetricsCollectorTest, RetentionIsExportedPerPlace) {
  const std::string h = "hostname=\"node-a\"";
  EXPECT_THAT(Scrape(), ::testing::Not(::testing::HasSubstr("profd_retention_kept_bytes{")));
  daemon_.SetRetentionSource([] {
    using Retained = DaemonMetrics::Snapshot::Retained;
    return std::pair{Retained{true, 7000, 3, 1500}, Retained{false, 0, 0, 0}};
  });
  const std::string text = Scrape();
  EXPECT_THAT(text, Line("profd_retention_kept_bytes{" + h + ",place=\"capture_dir\"} 7000"));
  EXPECT_THAT(text, Line("profd_retention_pruned_total{" + h + ",place=\"capture_dir\"} 3"));
  EXPECT_THAT(text,
              Line("profd_retention_pruned_bytes_total{" + h + ",place=\"capture_dir\"} 1500"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("place=\"store\"")));  // no cap there
}

// What profd_main.cc hands the capture orchestrator: a finished CaptureInfo becomes one capture.
TEST_F(MetricsCollectorTest, FinishedCaptureInfoIsCounted) {
  v1::CaptureInfo info;
  info.set_phase(v1::CAPTURE_PHASE_CANCELLED);
  info.set_requested_unix_ns(1'000'000'000);
  info.set_finished_unix_ns(1'750'000'000);
  for (uint64_t events : {100, 250}) {
    v1::ProcessCapture* p = info.add_processes();
    p->set_events(events);
    p->set_dropped_records(events / 50);
  }
  info.add_files()->set_bytes(4096);
  daemon_.OnCaptureFinished(info);
  const std::string text = Scrape();
  const std::string h = "hostname=\"node-a\"";
  EXPECT_THAT(text, Line("profd_captures_total{" + h + ",result=\"cancelled\"} 1"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_sum{" + h + "} 0.75"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"0.5\"} 0"));
  EXPECT_THAT(text, Line("profd_capture_duration_seconds_bucket{" + h + ",le=\"1\"} 1"));
  EXPECT_THAT(text, Line("profd_capture_events_total{" + h + "} 350"));
  EXPECT_THAT(text, Line("profd_capture_dropped_records_total{" + h + "} 7"));
  EXPECT_THAT(text, Line("profd_trace_written_bytes_total{" + h + "} 4096"));
}

// Every family, with all its label sets, passes Prometheus' own linter.
// The hardware counters: one series per counter a GPU measured, labelled as NVML labels the
// same GPU (joined by UUID: CUDA and NVML number GPUs differently); a counter not measured is
// left out, not 0; the availability gauge says whether they are sampled at all.
TEST_F(MetricsCollectorTest, HardwareCounterSeriesFollowNvmlLabels) {
  gpus_.PublishForTesting(TwoGpus(false));
  PmSampler counters(PmSampler::Options{});  // never started
  MetricsCollector collector(
      MetricsCollector::Sources{"node-a", &registry_, &gpus_, &daemon_, {}, {}, &counters});
  auto scrape = [&] { return prometheus::TextSerializer().Serialize(collector.Collect()); };
  EXPECT_THAT(scrape(), Line("profd_gpu_counters_available{hostname=\"node-a\"} 0"));

  GpuCounterSnapshot snapshot;
  snapshot.available = true;
  GpuCounterSample gpu;
  gpu.cuda_index = 0;  // NVML's GPU 3
  gpu.uuid = kUuid3;
  gpu.name = "NVIDIA H100 80GB HBM3";
  gpu.values.assign(GpuCounterDefs().size(), std::nan(""));
  gpu.values[0] = 0.5;   // sm active
  gpu.values[3] = 0.91;  // dram active
  snapshot.gpus.push_back(gpu);
  counters.PublishForTesting(snapshot);
  const std::string text = scrape();
  const std::string gpu3 = "gpu=\"3\",hostname=\"node-a\",model=\"NVIDIA H100 80GB HBM3\",uuid=\"" +
                           std::string(kUuid3) + "\"";
  EXPECT_THAT(text, Line("profd_gpu_counters_available{hostname=\"node-a\"} 1"));
  EXPECT_THAT(text, Line("profd_gpu_sm_active_ratio{" + gpu3 + "} 0.5"));
  EXPECT_THAT(text, Line("profd_gpu_dram_active_ratio{" + gpu3 + "} 0.91"));
  EXPECT_THAT(text, Not(HasSubstr("profd_gpu_tensor_active_ratio{")));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_PROF_SM_ACTIVE"));  // the HELP names dcgm's field

  testing::TempDir dir;
  const std::string file = dir.File("metrics.txt");
  std::ofstream(file) << text;
  testing::RunResult r = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool lint findings";
}

TEST_F(MetricsCollectorTest, PromtoolAcceptsTheFullExposition) {
  gpus_.PublishForTesting(TwoGpus(true));
  registry_.Register(1, kPid, 1000, Hello("llm-7f9c", {{0, kUuid3}}), absl::Now());
  registry_.Heartbeat(1, Counters(0, 1, 2, 3, 4), absl::Now());
  daemon_.OnCaptureFinished(CaptureResult::kSucceeded, absl::Seconds(1), 1, 0, 1);
  testing::TempDir dir;
  const std::string file = dir.File("metrics.txt");
  std::ofstream(file) << Scrape();
  testing::RunResult r = testing::Run({"/bin/sh", "-c", "promtool check metrics < " + file});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out + r.err, "") << "promtool lint findings";
}

}  // namespace
}  // namespace profd
