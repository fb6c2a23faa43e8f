// How long a /metrics scrape takes with 64 agents x 8 GPUs (the design target: <= 10 ms):
// 64 synthetic agents registered in a real AgentRegistry (Hello + Heartbeat with 8 devices'
// counters), an NVML snapshot of 8 GPUs with the 64 processes on each, and profd's health
// counters. Times MetricsCollector::Collect alone, Collect + text serialization (what the
// server does per scrape), and a real HTTP GET of /metrics from MetricsServer, plain and gzip.
//   metrics_scrape_bench [iterations]   (default 300)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/metrics/metrics_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "prometheus/text_serializer.h"
#include "tests/metrics/http_get.h"

namespace profd {
namespace {

constexpr int kAgents = 64;
constexpr int kGpus = 8;

std::string Uuid(int gpu) {
  return absl::StrCat("GPU-", gpu, "0000000-1111-2222-3333-444444444444");
}

void Fill(AgentRegistry& registry, GpuSampler& sampler, DaemonMetrics& daemon) {
  GpuSnapshot snapshot;
  snapshot.nvml_available = true;
  for (int g = 0; g < kGpus; ++g) {
    GpuSample gpu;
    gpu.index = g;
    gpu.uuid = Uuid(g);
    gpu.model = "NVIDIA H100 80GB HBM3";
    gpu.utilization = 0.5 + g / 100.0;
    gpu.memory_bandwidth_utilization = 0.2;
    gpu.memory_used_bytes = 40ull << 30;
    gpu.memory_total_bytes = 80ull << 30;
    for (int a = 0; a < kAgents; ++a) {
      GpuProcessSample p;
      p.pid = 100000 + a;
      p.comm = "python3";
      p.memory_used_bytes = (1ull << 30) + a;
      p.sm_utilization = 0.01 * (a % 100);
      gpu.processes.push_back(p);
    }
    snapshot.gpus.push_back(std::move(gpu));
  }
  for (const char* call :
       {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessUtilization"}) {
    snapshot.errors_by_call[call] = 0;
  }
  sampler.PublishForTesting(std::move(snapshot));

  for (int a = 0; a < kAgents; ++a) {
    v1::Hello hello;
    hello.set_agent_version("0.1.0");
    hello.set_pod_name(absl::StrCat("llm-inference-7f9c6d-", a));
    hello.set_pod_namespace("serving");
    hello.set_container_name("server");
    hello.set_injected(true);
    v1::Heartbeat hb;
    for (int g = 0; g < kGpus; ++g) {
      v1::DeviceInfo* d = hello.add_devices();
      d->set_ordinal(g);
      d->set_uuid(Uuid(g));
      d->set_name("NVIDIA H100 80GB HBM3");
      d->set_global_memory_bytes(80ull << 30);
      v1::DeviceCounters* c = hb.add_devices();
      c->set_device(g);
      c->set_kernel_launches(123456789ull + a);
      c->set_graph_launches(1234ull + g);
      c->set_memory_allocated_bytes((30ull << 30) + a);
      c->set_memory_peak_bytes((35ull << 30) + a);
    }
    registry.Register(a + 1, 100000 + a, 1000, hello, absl::Now());
    registry.Heartbeat(a + 1, hb, absl::Now());
  }
  for (int i = 0; i < 20; ++i) {
    daemon.OnCaptureStarted();
    daemon.OnCaptureFinished(CaptureResult::kSucceeded, absl::Seconds(i % 7), 1000000, 0, 8 << 20);
  }
}

void Report(const char* what, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  std::printf("%-34s median %8.0f us   p10 %8.0f   p90 %8.0f   min %8.0f   max %8.0f   (n=%zu)\n",
              what, at(0.5), at(0.1), at(0.9), us.front(), us.back(), us.size());
}

std::vector<double> Time(int iterations, const std::function<void()>& fn) {
  for (int i = 0; i < 5; ++i) fn();  // warm caches and the allocator
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return us;
}

int Main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 300;
  AgentRegistry registry;
  GpuSampler sampler(GpuSampler::Options{});
  DaemonMetrics daemon;
  Fill(registry, sampler, daemon);
  auto collector = std::make_shared<MetricsCollector>(MetricsCollector::Sources{
      "node-a", &registry, &sampler, &daemon, [] { return AgentChannelCounters{}; }, {}});

  size_t series = 0;
  for (const auto& f : collector->Collect()) series += f.metric.size();
  const std::string text = prometheus::TextSerializer().Serialize(collector->Collect());
  std::printf("%d agents x %d GPUs: %zu series, %zu bytes of exposition text\n", kAgents, kGpus,
              series, text.size());

  Report("registry List() (copy)", Time(iterations, [&] { (void)registry.List(); }));
  Report("Collect()", Time(iterations, [&] { (void)collector->Collect(); }));
  Report("Collect() + serialize", Time(iterations, [&] {
           (void)prometheus::TextSerializer().Serialize(collector->Collect());
         }));

  // Every request collects and serializes anew, as a Prometheus scrape every 15 s does (the
  // server's reuse window would otherwise answer most of these back-to-back requests from the
  // last scrape).
  MetricsServer::Options options;
  options.reuse_window = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", collector, options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string url = "http://" + (*server)->address() + "/metrics";
  // HttpGet asks for gzip, as Prometheus does; the server compresses.
  Report("HTTP GET /metrics (gzip)", Time(iterations, [&] {
           if (!testing::HttpGet(url).ok()) std::abort();
         }));
  return 0;
}

}  // namespace
}  // namespace profd

int main(int argc, char** argv) { return profd::Main(argc, argv); }
