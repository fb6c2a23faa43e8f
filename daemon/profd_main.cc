// profd: the per-node daemon. Wires the components together and waits for SIGTERM/SIGINT.
//   agent channel (unix socket) -> AgentRegistry -> gRPC service (unix socket + loopback TCP)
//   NVML sampler + AgentRegistry + DaemonMetrics -> /metrics (HTTP, prometheus-cpp)
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/capture/capture_orchestrator.h"
#include "daemon/log.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/gpu_sampler.h"
#include "daemon/metrics/metrics_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/server/profd_service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

ABSL_FLAG(std::string, runtime_dir, "/run/profd",
          "Folder for profd's sockets (agent.sock, profd.sock) unless given one by one");
ABSL_FLAG(std::string, agent_socket, "",
          "Unix socket agents connect to (default <runtime_dir>/agent.sock; agents read "
          "PROFD_AGENT_SOCKET)");
ABSL_FLAG(std::string, grpc_socket, "",
          "Unix socket for profctl (default <runtime_dir>/profd.sock); 'none' disables");
ABSL_FLAG(std::string, grpc_address, "127.0.0.1:7465",
          "TCP address for profctl; loopback by default, 'none' disables");
// All interfaces by default: Prometheus scrapes the node (or the DaemonSet pod IP) from another
// host. /metrics is read-only and carries no trace data; the control plane stays on loopback.
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9477",
          "host:port for Prometheus' /metrics (port 0: any free port); 'none' disables");
ABSL_FLAG(absl::Duration, nvml_sample_interval, absl::Seconds(1),
          "How often GPU utilization and memory are read from NVML");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library to dlopen (a path, or a name the dynamic loader finds)");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "How often agents send counters");
ABSL_FLAG(absl::Duration, agent_timeout, absl::Seconds(10),
          "An agent silent this long is dropped");
ABSL_FLAG(std::string, capture_dir, "/var/lib/profd/captures",
          "Folder where capture folders (traces, manifest, summary) are written");
ABSL_FLAG(absl::Duration, max_capture_duration, absl::Seconds(60),
          "Longest capture a request may ask for");
ABSL_FLAG(uint64_t, max_capture_events, 50'000'000,
          "Events kept per process and capture; the trace says when it was cut");
ABSL_FLAG(bool, record_batches, false,
          "Also keep each capture's raw event batches (batches-<pid>.pb) for replay");

namespace profd {
namespace {

constexpr char kComponent[] = "profd";

std::string Hostname() {
  if (const char* node = std::getenv("NODE_NAME"); node && node[0]) return node;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("profd: on-demand GPU profiling daemon. See README.md.");
  absl::ParseCommandLine(argc, argv);

  // Every thread started from here on inherits this mask; main waits for the signals below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::string runtime_dir = absl::GetFlag(FLAGS_runtime_dir);
  std::string agent_socket = absl::GetFlag(FLAGS_agent_socket);
  if (agent_socket.empty()) agent_socket = runtime_dir + "/agent.sock";
  std::string grpc_socket = absl::GetFlag(FLAGS_grpc_socket);
  if (grpc_socket.empty()) grpc_socket = runtime_dir + "/profd.sock";
  const std::string grpc_address = absl::GetFlag(FLAGS_grpc_address);

  DaemonIdentity identity;
  identity.hostname = Hostname();
  identity.started = absl::Now();
  identity.agent_socket = agent_socket;

  AgentRegistry registry;
  AgentChannelOptions channel_options;
  channel_options.socket_path = agent_socket;
  channel_options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  channel_options.agent_timeout = absl::GetFlag(FLAGS_agent_timeout);
  AgentChannelServer channel(channel_options, &registry);
  CaptureOptions capture_options;
  capture_options.hostname = identity.hostname;
  capture_options.capture_dir = absl::GetFlag(FLAGS_capture_dir);
  capture_options.max_duration = absl::GetFlag(FLAGS_max_capture_duration);
  capture_options.max_events = absl::GetFlag(FLAGS_max_capture_events);
  capture_options.record_batches = absl::GetFlag(FLAGS_record_batches);
  // Capture and store components report into daemon_metrics (daemon/metrics/daemon_metrics.h).
  DaemonMetrics daemon_metrics;
  capture_options.on_finished = [&daemon_metrics](const v1::CaptureInfo& info) {
    daemon_metrics.OnCaptureFinished(info);
  };
  CaptureOrchestrator captures(capture_options, &registry, &channel);
  channel.set_event_sink(&captures);
  if (absl::Status status = channel.Start(); !status.ok()) {
    LogError(kComponent, "cannot start the agent channel: %s", status.ToString());
    return 1;
  }

  GpuSampler::Options gpu_options;
  gpu_options.library_path = absl::GetFlag(FLAGS_nvml_library);
  gpu_options.interval =
      std::max(absl::GetFlag(FLAGS_nvml_sample_interval), absl::Milliseconds(100));
  GpuSampler gpu_sampler(gpu_options);
  gpu_sampler.Start();
  std::unique_ptr<MetricsServer> metrics_server;
  if (const std::string metrics_address = absl::GetFlag(FLAGS_metrics_address);
      metrics_address != "none" && !metrics_address.empty()) {
    auto collector = std::make_shared<MetricsCollector>(MetricsCollector::Sources{
        identity.hostname, &registry, &gpu_sampler, &daemon_metrics,
        [&channel] { return channel.protocol_errors(); },
        [&captures] { return static_cast<int64_t>(captures.counts().running); }});
    absl::StatusOr<std::unique_ptr<MetricsServer>> started =
        MetricsServer::Start(metrics_address, std::move(collector));
    if (!started.ok()) {
      LogError(kComponent, "%s", started.status().message());
      channel.Stop();
      return 1;
    }
    metrics_server = *std::move(started);
    identity.metrics_address = metrics_server->address();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (grpc_socket != "none") {
    unlink(grpc_socket.c_str());
    identity.grpc_addresses.push_back("unix:" + grpc_socket);
  }
  if (grpc_address != "none" && !grpc_address.empty()) {
    identity.grpc_addresses.push_back(grpc_address);
  }
  std::vector<int> bound_ports(identity.grpc_addresses.size(), 0);
  for (size_t i = 0; i < identity.grpc_addresses.size(); ++i) {
    builder.AddListeningPort(identity.grpc_addresses[i], grpc::InsecureServerCredentials(),
                             &bound_ports[i]);
  }
  ProfdService service(&identity, &registry, &channel, &captures);
  service.set_gpu_sampler(&gpu_sampler);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    LogError(kComponent, "cannot serve gRPC on %s: is another profd running?",
             absl::StrJoin(identity.grpc_addresses, ", "));
    channel.Stop();
    return 1;
  }
  for (size_t i = 0; i < identity.grpc_addresses.size(); ++i) {
    if (bound_ports[i] == 0) {
      LogError(kComponent, "cannot listen on %s (in use, or not permitted)",
               identity.grpc_addresses[i]);
      server->Shutdown();
      channel.Stop();
      return 1;
    }
  }
  if (grpc_socket != "none") chmod(grpc_socket.c_str(), 0660);
  LogInfo(kComponent, "profd %s on %s: gRPC %s; metrics %s", PROFD_VERSION, identity.hostname,
          absl::StrJoin(identity.grpc_addresses, ", "),
          identity.metrics_address.empty() ? "off"
                                           : "http://" + identity.metrics_address + "/metrics");

  int received = 0;
  sigwait(&signals, &received);
  LogInfo(kComponent, "signal %d: shutting down", received);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics_server.reset();
  gpu_sampler.Stop();
  channel.Stop();
  if (grpc_socket != "none") unlink(grpc_socket.c_str());
  LogInfo(kComponent, "stopped");
  return 0;
}

}  // namespace
}  // namespace profd

int main(int argc, char** argv) { return profd::Main(argc, argv); }
