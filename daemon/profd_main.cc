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
#include "daemon/store/byte_size.h"
#include "daemon/store/spool.h"
#include "daemon/store/trace_store.h"
#include "daemon/store/trace_store_service.h"
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
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "How often agents send counters");
ABSL_FLAG(absl::Duration, agent_timeout, absl::Seconds(10), "An agent silent this long is dropped");
ABSL_FLAG(std::string, capture_dir, "/var/lib/profd/captures",
          "Folder where capture folders (traces, manifest, summary) are written");
ABSL_FLAG(absl::Duration, max_capture_duration, absl::Seconds(60),
          "Longest capture a request may ask for");
ABSL_FLAG(uint64_t, max_capture_events, 50'000'000,
          "Events kept per process and capture; the trace says when it was cut");
ABSL_FLAG(bool, record_batches, false,
          "Also keep each capture's raw event batches (batches-<pid>.pb) for replay");

// The trace store (docs/STORE.md).
ABSL_FLAG(std::string, store, profd::store::kDefaultStoreUri,
          "Where finished captures go: file:///path or s3://bucket[/prefix]");
ABSL_FLAG(std::string, s3_endpoint, "",
          "S3-compatible endpoint, e.g. http://127.0.0.1:9000 (MinIO), "
          "https://storage.googleapis.com (GCS interop); default "
          "https://s3.<region>.amazonaws.com");
ABSL_FLAG(std::string, s3_region, "", "S3 region (default $AWS_REGION, else us-east-1)");
ABSL_FLAG(bool, s3_path_style, false,
          "Address buckets as <endpoint>/<bucket>/key (MinIO, Ceph RGW) instead of "
          "<bucket>.<endpoint>/key");
ABSL_FLAG(std::string, s3_part_size, "8MiB",
          "Traces larger than this go up as multipart uploads in parts of this size (>= 5MiB)");
ABSL_FLAG(std::string, spool_dir, profd::store::kDefaultSpoolDir,
          "Local folder finished captures wait in until they are uploaded");
ABSL_FLAG(std::string, spool_max_bytes, "10GiB",
          "Spool size cap: when full, new captures are refused (finished ones are never dropped)");
ABSL_FLAG(absl::Duration, upload_retry_initial, absl::Seconds(1),
          "First wait after a failed upload; doubles up to --upload_retry_max");
ABSL_FLAG(absl::Duration, upload_retry_max, absl::Minutes(5),
          "Longest wait between upload retries");

namespace profd {
namespace {

// Opens the store and its spool from the flags; on failure says why and leaves both null, so
// profd still serves agents and metrics (the store calls then answer with the reason).
std::string OpenStore(const std::string& hostname, std::unique_ptr<store::TraceStore>* trace_store,
                      std::unique_ptr<store::Spool>* spool) {
  store::S3Options s3;
  s3.endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  s3.region = absl::GetFlag(FLAGS_s3_region);
  s3.path_style = absl::GetFlag(FLAGS_s3_path_style);
  absl::StatusOr<uint64_t> part_size = store::ParseByteSize(absl::GetFlag(FLAGS_s3_part_size));
  if (!part_size.ok()) return absl::StrCat("--s3_part_size: ", part_size.status().message());
  s3.part_size = *part_size;
  absl::StatusOr<std::unique_ptr<store::TraceStore>> opened =
      store::TraceStore::Open(absl::GetFlag(FLAGS_store), s3);
  if (!opened.ok()) return std::string(opened.status().message());
  store::SpoolOptions options;
  options.dir = absl::GetFlag(FLAGS_spool_dir);
  absl::StatusOr<uint64_t> max_bytes = store::ParseByteSize(absl::GetFlag(FLAGS_spool_max_bytes));
  if (!max_bytes.ok()) return absl::StrCat("--spool_max_bytes: ", max_bytes.status().message());
  options.max_bytes = *max_bytes;
  options.retry_initial = absl::GetFlag(FLAGS_upload_retry_initial);
  options.retry_max = absl::GetFlag(FLAGS_upload_retry_max);
  options.hostname = hostname;
  absl::StatusOr<std::unique_ptr<store::Spool>> s = store::Spool::Open(options, opened->get());
  if (!s.ok()) return std::string(s.status().message());
  *trace_store = *std::move(opened);
  *spool = *std::move(s);
  return "";
}

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
  std::unique_ptr<store::TraceStore> trace_store;
  std::unique_ptr<store::Spool> spool;  // the capture code submits finished captures here
  std::string store_error = OpenStore(identity.hostname, &trace_store, &spool);
  if (store_error.empty()) {
    identity.store_uri = trace_store->uri();
    LogInfo(kComponent, "store %s, spool %s", trace_store->uri(), spool->dir());
  } else {
    LogError(kComponent, "no trace store, captures cannot be kept: %s", store_error);
  }
  CaptureOptions capture_options;
  capture_options.hostname = identity.hostname;
  capture_options.capture_dir = absl::GetFlag(FLAGS_capture_dir);
  capture_options.max_duration = absl::GetFlag(FLAGS_max_capture_duration);
  capture_options.max_events = absl::GetFlag(FLAGS_max_capture_events);
  capture_options.record_batches = absl::GetFlag(FLAGS_record_batches);
  if (spool) {
    // A full spool refuses new captures up front rather than losing them at the end.
    capture_options.check_space = [&spool] { return spool->CheckSpace(0); };
    // Every finished capture goes to the store through the spool (hard links, no second copy);
    // its folder in --capture_dir stays where profctl capture --output reads it.
    capture_options.on_complete = [&spool](
                                      const v1::CaptureInfo& info,
                                      const std::string& folder) -> absl::StatusOr<std::string> {
      absl::StatusOr<v1::StoredTrace> queued = spool->SubmitCopy(info.capture_id(), folder);
      if (!queued.ok()) return queued.status();
      return folder;
    };
  }
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
  store::TraceStoreService store_service(trace_store.get(), spool.get(), identity.hostname,
                                         store_error);
  ProfdService service(&identity, &registry, &channel, &captures);
  service.set_gpu_sampler(&gpu_sampler);
  builder.RegisterService(&service);
  builder.RegisterService(&store_service);
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
  LogInfo(
      kComponent, "profd %s on %s: gRPC %s; metrics %s", PROFD_VERSION, identity.hostname,
      absl::StrJoin(identity.grpc_addresses, ", "),
      identity.metrics_address.empty() ? "off" : "http://" + identity.metrics_address + "/metrics");

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
