// profd: the per-node daemon. Wires the components together and waits for SIGTERM/SIGINT.
//   agent channel (unix socket) -> AgentRegistry -> gRPC service (unix socket for root and
//   --access_group; TCP only when asked, with mutual TLS; docs/SECURITY.md)
//   NVML sampler + AgentRegistry + DaemonMetrics -> /metrics (HTTP, daemon/metrics)
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/https_client.h"
#include "daemon/agents/agent_channel_server.h"
#include "daemon/agents/agent_registry.h"
#include "daemon/agents/pod_directory.h"
#include "daemon/alerts/alert_webhook.h"
#include "daemon/capture/capture_orchestrator.h"
#include "daemon/capture/capture_targets.h"
#include "daemon/csi/csi_node_service.h"
#include "daemon/kineto/kineto_config.h"
#include "daemon/kineto/kineto_ipc_server.h"
#include "daemon/log.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/gpu_sampler.h"
#include "daemon/metrics/metrics_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/pm_sampler.h"
#include "daemon/server/access_control.h"
#include "daemon/server/listener_config.h"
#include "daemon/server/process_limits.h"
#include "daemon/server/profd_service.h"
#include "daemon/server/runtime_lock.h"
#include "daemon/server/tcp_listener.h"
#include "daemon/store/byte_size.h"
#include "daemon/store/retention.h"
#include "daemon/store/spool.h"
#include "daemon/store/trace_store.h"
#include "daemon/store/trace_store_service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "profd/v1/agent_frame.h"
#include "profd/v1/control_limits.h"

ABSL_FLAG(std::string, runtime_dir, "/run/profd",
          "Folder for profd's sockets (agent.sock, profd.sock) unless given one by one");
ABSL_FLAG(std::string, agent_socket, "",
          "Unix socket agents connect to (default <runtime_dir>/agent.sock; agents read "
          "PROFD_AGENT_SOCKET)");
ABSL_FLAG(std::string, grpc_socket, "",
          "Unix socket for profctl (default <runtime_dir>/profd.sock); 'none' disables. Owned by "
          "root and --access_group, mode 0660 (0600 without a group)");

// Access control (docs/SECURITY.md): who may start captures and read traces. Locally, root and
// the members of --access_group, through the control socket's and the trace folders' file
// permissions; over TCP, only holders of a client certificate (mutual TLS).
ABSL_FLAG(std::string, access_group, "",
          "Group (name or numeric gid) whose members may use profctl and read capture files: it "
          "owns the control socket (0660) and the capture, spool and store folders (2750, files "
          "0640). Empty: root only");
ABSL_FLAG(std::string, grpc_address, "none",
          "TCP address for profctl, e.g. 0.0.0.0:7465; 'none' (the default) serves only the unix "
          "socket. Needs mutual TLS (--grpc_tls_cert, --grpc_tls_key, --grpc_tls_client_ca) or "
          "--grpc_insecure_tcp");
// The unix socket stays plaintext: it is local and guarded by its file mode.
ABSL_FLAG(std::string, grpc_tls_cert, "",
          "PEM certificate (chain) for the TCP listener; with --grpc_tls_key, --grpc_address "
          "speaks TLS only");
ABSL_FLAG(std::string, grpc_tls_key, "", "PEM private key of --grpc_tls_cert");
ABSL_FLAG(std::string, grpc_tls_client_ca, "",
          "PEM CA: TCP clients must present a certificate signed by it (mutual TLS)");
ABSL_FLAG(bool, grpc_insecure_tcp, false,
          "Serve --grpc_address WITHOUT client certificates (plaintext, or TLS without "
          "--grpc_tls_client_ca), on loopback too: anyone who can connect to it, on loopback "
          "every local user, can list processes, start captures and download traces");
ABSL_FLAG(bool, grpc_insecure_remote, false,
          "Deprecated: the old name of --grpc_insecure_tcp (which now also covers loopback)");
// Before a TCP client has a certificate checked it is anyone on the network: what it may hold
// is bounded (daemon/server/tcp_listener.h).
ABSL_FLAG(absl::Duration, grpc_handshake_timeout, absl::Seconds(5),
          "A --grpc_address connection that has not sent its TLS ClientHello by then is closed, "
          "and gRPC gives the TLS handshake that follows as long again");
ABSL_FLAG(uint32_t, grpc_max_pending_connections, 64,
          "--grpc_address connections that have not sent their ClientHello yet, at most; a new "
          "one past it closes the oldest (lowered to RLIMIT_NOFILE/8)");
// All interfaces by default: Prometheus scrapes the node (or the DaemonSet pod IP) from another
// host. /metrics is read-only and carries no trace data; the control plane is not on it.
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9477",
          "host:port for Prometheus' /metrics (port 0: any free port); 'none' disables");
// Alertmanager -> capture (docs/ALERTS.md): off by default; it starts captures, so it needs a
// bearer token.
ABSL_FLAG(std::string, alert_address, "none",
          "host:port of the Alertmanager webhook (POST /alerts), e.g. 0.0.0.0:9478; 'none' (the "
          "default) turns it off. Needs --alert_token_file, or mutual TLS (--alert_tls_cert, "
          "--alert_tls_key, --alert_tls_client_ca), or both");
ABSL_FLAG(std::string, alert_token_file, "",
          "File holding the bearer token Alertmanager sends (http_config.authorization."
          "credentials_file on its side); requests without it get 401");
ABSL_FLAG(std::string, alert_tls_cert, "",
          "PEM certificate (chain) of the alert listener; with --alert_tls_key it speaks HTTPS "
          "only (Alertmanager's webhook url https://...)");
ABSL_FLAG(std::string, alert_tls_key, "", "PEM private key of --alert_tls_cert");
ABSL_FLAG(std::string, alert_tls_client_ca, "",
          "PEM CA: the alert listener's clients must present a certificate it signed (mutual TLS, "
          "Alertmanager's http_config.tls_config cert_file/key_file); then --alert_token_file "
          "is optional");
ABSL_FLAG(std::string, alert_target_labels, "",
          "Which alert labels name the processes to capture, as target=label pairs (targets pid, "
          "pod, namespace, node, gpu), e.g. pod=kubernetes_pod_name,node=instance; default: the "
          "labels of profd's own series (pid, pod, namespace, gpu, and hostname for the node)");
ABSL_FLAG(absl::Duration, alert_capture_duration, absl::Seconds(5),
          "Capture length for alerts without the annotation profd_capture_duration");
ABSL_FLAG(absl::Duration, alert_capture_before, absl::Seconds(10),
          "An alert's capture begins this long before the alert fired (its startsAt), with what "
          "each process's flight recorder kept (profctl recorder on); without the annotation "
          "profd_capture_before. 0s: at the notification");
ABSL_FLAG(absl::Duration, alert_cooldown, absl::Minutes(10),
          "After an alert group started a capture, its alerts start none for this long");
ABSL_FLAG(uint32_t, alert_max_captures_per_hour, 12,
          "Captures alerts may start per hour, all groups together");
ABSL_FLAG(uint32_t, alert_max_concurrent_captures, 2,
          "Captures started by alerts that may run at once");
ABSL_FLAG(absl::Duration, nvml_sample_interval, absl::Seconds(1),
          "How often GPU utilization and memory are read from NVML");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML library to dlopen (a path, or a name the dynamic loader finds)");
// docs/HARDWARE_COUNTERS.md: device-wide, from profd's own process, no CUDA context.
ABSL_FLAG(bool, gpu_counters, false,
          "Sample each GPU's hardware counters (SM active, occupancy, tensor pipes, DRAM, PCIe) "
          "with CUPTI PM sampling for /metrics. Off by default: it costs the application nothing "
          "measurable but profd ~135 MB more memory (the driver's and CUPTI's); off also leaves "
          "the counters to another tool (Nsight Compute, DCGM profiling)");
ABSL_FLAG(absl::Duration, gpu_counters_interval, absl::Milliseconds(10),
          "PM sampling interval of --gpu_counters (100us to 1s); /metrics shows the mean of each "
          "second");
ABSL_FLAG(std::string, cupti_library, "",
          "CUPTI 13 library for --gpu_counters and captures' --gpu-metrics (default: "
          "libcupti.so.13 on the library path, "
          "then /usr/local/cuda/lib64)");
// PyTorch processes started with KINETO_USE_DAEMON=1 poll here for operator-level captures
// (docs/KINETO.md). They must set KINETO_IPC_SOCKET_DIR to exactly this folder.
ABSL_FLAG(std::string, kineto_socket_dir, "",
          "Folder of the Kineto daemon socket 'dynolog' (default <runtime_dir>/kineto); processes "
          "set KINETO_IPC_SOCKET_DIR to exactly this path; 'none' disables");
ABSL_FLAG(absl::Duration, kineto_poll_interval, absl::Seconds(1),
          "How often PyTorch processes poll for captures (written to <runtime_dir>/kineto.conf, "
          "which they read through KINETO_CONFIG); Kineto's own default is 5s");
ABSL_FLAG(std::string, kineto_max_trace_bytes, "2GiB",
          "Largest trace profd takes from a process captured through Kineto");
ABSL_FLAG(std::string, csi_socket, "none",
          "Serve the CSI node plugin (application pods mount the agent and its socket as an "
          "inline csi.profd.dev volume, no hostPath) on this unix socket; none: off");
ABSL_FLAG(std::string, csi_driver_name, "csi.profd.dev", "The CSIDriver object's name");
ABSL_FLAG(std::string, csi_target_root, "/var/lib/kubelet/pods",
          "The CSI plugin mounts pods' volumes only under this folder (the kubelet's pod folder)");
ABSL_FLAG(std::string, kubernetes_pods, "none",
          "Verify which pod a process is in: its cgroup's pod UID looked up in the node's pod "
          "list. apiserver: the API server's, from inside the cluster (pods on --node_name); an "
          "https:// URL answering a v1 PodList (e.g. the kubelet's /pods); none: take the "
          "process's POD_NAME/POD_NAMESPACE as it says");
ABSL_FLAG(std::string, kubernetes_authorization, "none",
          "Who may capture over --grpc_address: apiserver (from inside the cluster) or the API "
          "server's https:// URL. Callers then show a Kubernetes bearer token (profctl sends its "
          "kubeconfig's), checked with a TokenReview, and need create on captures.profd.dev in "
          "each namespace the capture reaches (a SubjectAccessReview); every capture gets an "
          "audit line. Uses --kubernetes_token_file and --kubernetes_ca_file. none: whoever "
          "passes mutual TLS may capture");
ABSL_FLAG(std::string, kubernetes_token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token",
          "profd's bearer token for --kubernetes_pods and --kubernetes_authorization (read again "
          "for each request); empty: none");
ABSL_FLAG(std::string, kubernetes_ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
          "PEM CA of the --kubernetes_pods and --kubernetes_authorization servers; empty: the "
          "system's CAs");
ABSL_FLAG(std::string, node_name, "",
          "This node's Kubernetes name (default: $NODE_NAME, else the host name)");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "How often agents send counters");
ABSL_FLAG(absl::Duration, agent_timeout, absl::Seconds(10), "An agent silent this long is dropped");
// What one peer of the agent socket (0666: any local user) may cost profd; docs/SECURITY.md.
ABSL_FLAG(absl::Duration, agent_hello_timeout, absl::Seconds(5),
          "A connection that has not said hello this long after connecting is closed");
ABSL_FLAG(uint32_t, agent_max_connections, 1024,
          "Agent connections at once (two file descriptors each; lowered to a quarter of "
          "RLIMIT_NOFILE); past it connections are accepted and closed at once");
ABSL_FLAG(uint32_t, agent_max_connections_per_uid, 0,
          "Agent connections one uid may hold, so that one user cannot take every slot; 0: "
          "three quarters of the agent connection cap in force (pods often share one uid)");
ABSL_FLAG(std::string, agent_max_frame_before_hello, "64KiB",
          "Largest agent frame before its hello (a hello is a few hundred bytes)");
ABSL_FLAG(std::string, agent_max_frame_registered, "256KiB",
          "Largest frame from a registered agent that no running capture targets");
ABSL_FLAG(std::string, agent_max_frame_capturing, "4MiB",
          "Largest frame from the target of a running capture (agents cut event batches at "
          "~1MiB; at least 2MiB)");
ABSL_FLAG(std::string, agent_max_buffered_bytes, "64MiB",
          "All agent frames being read, together; a frame that does not fit waits for room");
ABSL_FLAG(std::string, agent_max_backlog_bytes_per_connection, "16MiB",
          "Event batches of one agent waiting for its capture to write them; past it profd "
          "stops reading that agent until the capture catches up");
ABSL_FLAG(std::string, agent_max_backlog_bytes, "64MiB",
          "Event batches of all agents waiting for their captures, together");
ABSL_FLAG(uint32_t, agent_max_messages_per_second, 100,
          "Messages per agent connection and second (event batches of a running capture "
          "excepted); a connection that sends more is closed");
ABSL_FLAG(std::string, capture_dir, "/var/lib/profd/captures",
          "Folder where capture folders (traces, manifest, summary) are written");
ABSL_FLAG(absl::Duration, max_capture_duration, absl::Seconds(60),
          "Longest capture a request may ask for");
ABSL_FLAG(uint64_t, max_capture_events, 50'000'000,
          "Events kept per process and capture; the trace says when it was cut");
ABSL_FLAG(absl::Duration, capture_cancel_timeout, absl::Seconds(5),
          "After `profctl cancel`, how long agents have to report their capture's end before "
          "profd ends it without them (its trace keeps what came)");
ABSL_FLAG(std::string, capture_min_free, "64MiB",
          "Refuse captures while the --capture_dir disk has less than this free");
ABSL_FLAG(std::string, trace_format, "json",
          "Traces of captures that do not say (profctl capture --format): json (Chrome trace "
          "JSON in Kineto's conventions: HTA, TensorBoard, chrome://tracing, Perfetto UI) or "
          "perfetto (Perfetto protobuf: Perfetto UI and trace_processor; 2.5x smaller, ~4x faster "
          "to write)");
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
ABSL_FLAG(absl::Duration, s3_timeout, absl::Seconds(30),
          "A store request that moves no byte for this long fails (and is retried): an endpoint "
          "that takes connections and never answers holds no thread for ever");
ABSL_FLAG(std::string, spool_dir, profd::store::kDefaultSpoolDir,
          "Local folder finished captures wait in until they are uploaded");
ABSL_FLAG(std::string, spool_max_bytes, "10GiB",
          "Spool size cap: when full, new captures are refused (finished ones are never dropped)");
ABSL_FLAG(absl::Duration, upload_retry_initial, absl::Seconds(1),
          "First wait after a failed upload; doubles up to --upload_retry_max");
ABSL_FLAG(absl::Duration, upload_retry_max, absl::Minutes(5),
          "Longest wait between upload retries");

// Retention (docs/STORE.md): what keeps --capture_dir, and a local store when asked, off a full
// disk.
ABSL_FLAG(absl::Duration, capture_retention_age, absl::Hours(72),
          "Capture folders in --capture_dir older than this are deleted once they are in the "
          "store; inf keeps them");
ABSL_FLAG(std::string, capture_retention_bytes, "10GiB",
          "Past this total, the oldest capture folders in --capture_dir that are in the store "
          "are deleted; 0 for no cap");
ABSL_FLAG(absl::Duration, store_retention_age, absl::InfiniteDuration(),
          "Local (file://) store: this host's captures older than this are deleted (default "
          "inf: kept)");
ABSL_FLAG(std::string, store_retention_bytes, "0",
          "Local (file://) store: past this total, this host's oldest captures are deleted (0: no "
          "cap)");
ABSL_FLAG(absl::Duration, retention_interval, absl::Minutes(1),
          "How often retention looks at --capture_dir and the local store");

namespace profd {
namespace {

// Opens the store and its spool from the flags; on failure says why and leaves both null, so
// profd still serves agents and metrics (the store calls then answer with the reason). The spool
// and a local store get the access group's folder permissions first; a folder that cannot be
// restricted is not used.
std::string OpenStore(const std::string& hostname, const AccessGroup& access,
                      std::unique_ptr<store::TraceStore>* trace_store,
                      std::unique_ptr<store::Spool>* spool) {
  const std::string uri = absl::GetFlag(FLAGS_store);
  if (absl::StartsWith(uri, "file://") || absl::StartsWith(uri, "/")) {
    const std::string root(absl::StripPrefix(uri, "file://"));
    if (absl::Status s = PrepareDataFolder("store", root, access); !s.ok()) {
      return std::string(s.message());
    }
  }
  if (absl::Status s = PrepareDataFolder("spool_dir", absl::GetFlag(FLAGS_spool_dir), access);
      !s.ok()) {
    return std::string(s.message());
  }
  store::S3Options s3;
  s3.endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  s3.region = absl::GetFlag(FLAGS_s3_region);
  s3.path_style = absl::GetFlag(FLAGS_s3_path_style);
  absl::StatusOr<uint64_t> part_size = store::ParseByteSize(absl::GetFlag(FLAGS_s3_part_size));
  if (!part_size.ok()) return absl::StrCat("--s3_part_size: ", part_size.status().message());
  s3.part_size = *part_size;
  s3.stall_timeout = absl::GetFlag(FLAGS_s3_timeout);
  if (s3.stall_timeout < absl::Seconds(1)) {
    return absl::StrCat("--s3_timeout=", absl::FormatDuration(s3.stall_timeout),
                        ": give at least 1s (libcurl counts stalls in whole seconds)");
  }
  absl::StatusOr<std::unique_ptr<store::TraceStore>> opened = store::TraceStore::Open(uri, s3);
  if (!opened.ok()) return std::string(opened.status().message());
  store::SpoolOptions options;
  options.dir = absl::GetFlag(FLAGS_spool_dir);
  absl::StatusOr<uint64_t> max_bytes = store::ParseByteSize(absl::GetFlag(FLAGS_spool_max_bytes));
  if (!max_bytes.ok()) return absl::StrCat("--spool_max_bytes: ", max_bytes.status().message());
  options.max_bytes = *max_bytes;
  options.retry_initial = absl::GetFlag(FLAGS_upload_retry_initial);
  options.retry_max = absl::GetFlag(FLAGS_upload_retry_max);
  options.hostname = hostname;
  // Captures the spool could not take wait in --capture_dir, marked; a restart retries them.
  options.capture_dir = absl::GetFlag(FLAGS_capture_dir);
  absl::StatusOr<std::unique_ptr<store::Spool>> s = store::Spool::Open(options, opened->get());
  if (!s.ok()) return std::string(s.status().message());
  *trace_store = *std::move(opened);
  *spool = *std::move(s);
  return "";
}

constexpr char kComponent[] = "profd";

// What issue 12 asks of the process before anything starts: files 0640 and folders 0750 (umask
// 027), all the open files the hard limit allows, the access group, socket folders others can
// reach (the agent socket is 0666 on purpose), and a capture folder only root and the group can
// read. An error stops profd: it would otherwise run with traces readable by everyone.
absl::StatusOr<AccessGroup> SetUpProcess(const std::string& agent_socket,
                                         const std::string& grpc_socket) {
  RestrictUmask();
  OpenFileLimit files = RaiseOpenFileLimit();
  if (!files.error.empty()) {
    LogWarning(kComponent,
               "open files: cannot raise the limit from %d to the hard limit %d: %s; set "
               "LimitNOFILE (systemd) or the container runtime's limit",
               files.before, files.hard, files.error);
  } else {
    LogInfo(kComponent, "open files: limit %d (was %d, hard limit %d)", files.soft, files.before,
            files.hard);
  }
  absl::StatusOr<AccessGroup> access = ResolveAccessGroup(absl::GetFlag(FLAGS_access_group));
  if (!access.ok()) return access.status();
  for (const std::string& socket : {agent_socket, grpc_socket}) {
    if (socket == "none") continue;
    const std::string folder = std::filesystem::path(socket).parent_path().string();
    if (absl::Status s = MakeSocketFolder(folder); !s.ok()) return s;
  }
  if (absl::Status s = PrepareDataFolder("capture_dir", absl::GetFlag(FLAGS_capture_dir), *access);
      !s.ok()) {
    return s;
  }
  return access;
}

// The agent channel's limits from their flags; byte sizes take units ("64KiB").
absl::Status AgentChannelFlags(AgentChannelOptions* options) {
  struct ByteFlag {
    const char* name;
    std::string value;
    uint64_t* out;
  };
  uint64_t before_hello, registered, capturing, buffered, backlog_one, backlog_all;
  for (const ByteFlag& flag : {
           ByteFlag{"agent_max_frame_before_hello",
                    absl::GetFlag(FLAGS_agent_max_frame_before_hello), &before_hello},
           ByteFlag{"agent_max_frame_registered", absl::GetFlag(FLAGS_agent_max_frame_registered),
                    &registered},
           ByteFlag{"agent_max_frame_capturing", absl::GetFlag(FLAGS_agent_max_frame_capturing),
                    &capturing},
           ByteFlag{"agent_max_buffered_bytes", absl::GetFlag(FLAGS_agent_max_buffered_bytes),
                    &buffered},
           ByteFlag{"agent_max_backlog_bytes_per_connection",
                    absl::GetFlag(FLAGS_agent_max_backlog_bytes_per_connection), &backlog_one},
           ByteFlag{"agent_max_backlog_bytes", absl::GetFlag(FLAGS_agent_max_backlog_bytes),
                    &backlog_all},
       }) {
    absl::StatusOr<uint64_t> bytes = store::ParseByteSize(flag.value);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag.name, ": ", bytes.status().message()));
    }
    *flag.out = *bytes;
  }
  // Frames are counted in 32 bits on the wire; the channel checks the rest when it starts.
  if (std::max({before_hello, registered, capturing}) > v1::kMaxAgentFrameBytes) {
    return absl::InvalidArgumentError(
        "--agent_max_frame_* must be at most 16MiB, the agent protocol's own limit");
  }
  options->hello_timeout = absl::GetFlag(FLAGS_agent_hello_timeout);
  options->max_connections = absl::GetFlag(FLAGS_agent_max_connections);
  options->max_connections_per_uid = absl::GetFlag(FLAGS_agent_max_connections_per_uid);
  options->max_frame_before_hello = static_cast<uint32_t>(before_hello);
  options->max_frame_registered = static_cast<uint32_t>(registered);
  options->max_frame_capturing = static_cast<uint32_t>(capturing);
  options->max_buffered_bytes = buffered;
  options->max_backlog_bytes_per_connection = backlog_one;
  options->max_backlog_bytes = backlog_all;
  options->max_messages_per_second = absl::GetFlag(FLAGS_agent_max_messages_per_second);
  return absl::OkStatus();
}

std::string Hostname() {
  if (const char* node = std::getenv("NODE_NAME"); node && node[0]) return node;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// glibc raises its mmap and trim thresholds after the first large block is freed (up to 32 and
// 64 MiB), after which what a capture freed stays resident at the top of its pipeline thread's
// arena, where malloc_trim does not reach: 36 MiB held after a capture of a 525 MB Kineto trace
// (tests/bench/distinct_names_bench). Fixed thresholds turn that off: blocks of 1 MiB and more
// are mapped and unmapped, an arena's free top past 8 MiB is given back.
void HoldFreedMemoryBriefly() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
}

// profd's configuration from its flags, checked before anything starts: a bad flag stops profd
// before it takes the runtime folder, a socket or a thread.
struct Config {
  std::string runtime_dir;
  std::string agent_socket;
  std::string grpc_socket;  // "none": no unix socket
  ListenerFlags listener_flags;
  ListenerConfig listener;
  std::string hostname;
  AgentChannelOptions channel;
  CaptureOptions capture;  // its callbacks are the Daemon's
  store::RetentionOptions retention;
  std::string kineto_dir;  // "none": Kineto's daemon protocol is not served
  PmSampler::Options counters;
  GpuSampler::Options gpu;
  std::string metrics_address;  // "none" or empty: no /metrics
  std::string alert_address;    // "none" or empty: no Alertmanager webhook
  alerts::AlertWebhookOptions alerts;
  HttpServer::Options::Tls alert_tls;  // no cert_file: plain HTTP
  std::string csi_socket;              // "none": no CSI node plugin
  CsiNodeOptions csi;
  std::optional<PodDirectory::Options> pods;                   // none: pods as processes claim them
  std::optional<KubernetesAuthorizer::Options> authorization;  // none: mutual TLS decides
};

absl::Status AlertCaptureFlags(Config* config);

// The Alertmanager webhook's configuration; its token is read now, so that a missing or empty
// token file stops profd at start rather than refusing every alert later.
absl::Status AlertFlags(Config* config) {
  config->alert_address = absl::GetFlag(FLAGS_alert_address);
  if (config->alert_address == "none" || config->alert_address.empty()) return absl::OkStatus();
  HttpServer::Options::Tls& tls = config->alert_tls;
  tls.cert_file = absl::GetFlag(FLAGS_alert_tls_cert);
  tls.key_file = absl::GetFlag(FLAGS_alert_tls_key);
  tls.client_ca_file = absl::GetFlag(FLAGS_alert_tls_client_ca);
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--alert_tls_cert and --alert_tls_key go together");
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--alert_tls_client_ca needs --alert_tls_cert and --alert_tls_key: client certificates "
        "are asked for in a TLS handshake");
  }
  const std::string token_file = absl::GetFlag(FLAGS_alert_token_file);
  if (token_file.empty()) {
    if (!tls.client_ca_file.empty()) return AlertCaptureFlags(config);  // mutual TLS alone
    return absl::InvalidArgumentError(
        "--alert_address needs --alert_token_file: a file holding the bearer token Alertmanager "
        "sends (http_config.authorization.credentials_file), e.g. made with "
        "`openssl rand -hex 32 > /etc/profd/alert-token`; or mutual TLS (--alert_tls_cert, "
        "--alert_tls_key, --alert_tls_client_ca)");
  }
  std::ifstream in(token_file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--alert_token_file=", token_file,
                                                   ": cannot read it: ", std::strerror(errno)));
  }
  config->alerts.token = std::string(absl::StripAsciiWhitespace(text.str()));
  if (config->alerts.token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--alert_token_file=", token_file, ": the token is ", config->alerts.token.size(),
        " characters; give at least 16 (e.g. `openssl rand -hex 32`)"));
  }
  return AlertCaptureFlags(config);
}

// What an alert's capture is: the labels that name its processes, its defaults and limits.
absl::Status AlertCaptureFlags(Config* config) {
  absl::StatusOr<alerts::AlertTargetLabels> labels =
      alerts::ParseAlertTargetLabels(absl::GetFlag(FLAGS_alert_target_labels));
  if (!labels.ok()) return labels.status();
  config->alerts.capture.labels = *std::move(labels);
  config->alerts.capture.node = config->hostname;
  config->alerts.capture.default_duration = absl::GetFlag(FLAGS_alert_capture_duration);
  config->alerts.capture.default_before = absl::GetFlag(FLAGS_alert_capture_before);
  config->alerts.policy.cooldown = absl::GetFlag(FLAGS_alert_cooldown);
  config->alerts.policy.max_per_hour = absl::GetFlag(FLAGS_alert_max_captures_per_hour);
  config->alerts.policy.max_concurrent = absl::GetFlag(FLAGS_alert_max_concurrent_captures);
  return absl::OkStatus();
}

// --kubernetes_pods and the flags beside it.
absl::StatusOr<std::optional<PodDirectory::Options>> PodDirectoryFlags(const std::string& node) {
  const std::string source = absl::GetFlag(FLAGS_kubernetes_pods);
  if (source == "none" || source.empty()) return std::nullopt;
  PodDirectory::Options options;
  if (source == "apiserver") {
    absl::StatusOr<std::string> url = PodDirectory::InClusterUrl(node);
    if (!url.ok()) return url.status();
    options.url = *url;
  } else if (absl::StartsWith(source, "https://")) {
    options.url = source;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kubernetes_pods=", source, ": expected none, apiserver or an https:// URL"));
  }
  options.token_file = absl::GetFlag(FLAGS_kubernetes_token_file);
  options.ca_file = absl::GetFlag(FLAGS_kubernetes_ca_file);
  return options;
}

// --kubernetes_authorization and the flags beside it.
absl::StatusOr<std::optional<KubernetesAuthorizer::Options>> AuthorizationFlags() {
  return KubernetesAuthorizer::FromFlags(
      "--kubernetes_authorization", absl::GetFlag(FLAGS_kubernetes_authorization),
      absl::GetFlag(FLAGS_kubernetes_token_file), absl::GetFlag(FLAGS_kubernetes_ca_file));
}

ListenerFlags ListenerFlagsFromFlags() {
  ListenerFlags flags;
  flags.address = absl::GetFlag(FLAGS_grpc_address);
  flags.tls_cert_file = absl::GetFlag(FLAGS_grpc_tls_cert);
  flags.tls_key_file = absl::GetFlag(FLAGS_grpc_tls_key);
  flags.tls_client_ca_file = absl::GetFlag(FLAGS_grpc_tls_client_ca);
  flags.insecure_tcp = absl::GetFlag(FLAGS_grpc_insecure_tcp);
  flags.insecure_remote = absl::GetFlag(FLAGS_grpc_insecure_remote);
  flags.handshake_timeout = absl::GetFlag(FLAGS_grpc_handshake_timeout);
  return flags;
}

absl::Status CaptureFlags(CaptureOptions* options) {
  options->capture_dir = absl::GetFlag(FLAGS_capture_dir);
  options->max_duration = absl::GetFlag(FLAGS_max_capture_duration);
  options->max_events = absl::GetFlag(FLAGS_max_capture_events);
  options->cancel_timeout = absl::GetFlag(FLAGS_capture_cancel_timeout);
  absl::StatusOr<uint64_t> min_free = store::ParseByteSize(absl::GetFlag(FLAGS_capture_min_free));
  if (!min_free.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--capture_min_free: ", min_free.status().message()));
  }
  options->min_free_bytes = *min_free;
  const TraceFormatInfo* format = TraceFormatNamed(absl::GetFlag(FLAGS_trace_format));
  if (format == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--trace_format ", absl::GetFlag(FLAGS_trace_format), ": give ", TraceFormatChoices()));
  }
  options->trace_format = format->format;
  options->record_batches = absl::GetFlag(FLAGS_record_batches);
  return absl::OkStatus();
}

absl::Status RetentionFlags(store::RetentionOptions* options) {
  options->capture_dir = absl::GetFlag(FLAGS_capture_dir);
  options->interval = std::max(absl::GetFlag(FLAGS_retention_interval), absl::Milliseconds(10));
  options->capture_dir_limits.max_age = absl::GetFlag(FLAGS_capture_retention_age);
  options->store_limits.max_age = absl::GetFlag(FLAGS_store_retention_age);
  for (auto [flag, name, out] :
       {std::tuple{&FLAGS_capture_retention_bytes, "--capture_retention_bytes",
                   &options->capture_dir_limits.max_bytes},
        std::tuple{&FLAGS_store_retention_bytes, "--store_retention_bytes",
                   &options->store_limits.max_bytes}}) {
    const std::string text = absl::GetFlag(*flag);
    absl::StatusOr<uint64_t> bytes = text == "0" ? 0 : store::ParseByteSize(text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", bytes.status().message()));
    }
    *out = *bytes;
  }
  return absl::OkStatus();
}

// Whether `path` is `dir` or below it, by their names.
bool IsInside(const std::string& path, const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
  auto d_end = std::mismatch(d.begin(), d.end(), p.begin(), p.end()).first;
  return d_end == d.end() || (std::next(d_end) == d.end() && d_end->empty());
}

// What the CSI plugin mounts into pods is the runtime folder: profctl's socket and the traces
// must not be in it (a pod running as root could reach them).
absl::Status CheckCsiFolders(const Config& config) {
  if (!absl::StartsWith(config.csi.target_root, "/")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--csi_target_root must be an absolute path, not \"", config.csi.target_root, "\""));
  }
  const std::vector<std::pair<std::string, std::string>> private_paths = {
      {"--grpc_socket", config.grpc_socket == "none" ? "" : config.grpc_socket},
      {"--capture_dir", absl::GetFlag(FLAGS_capture_dir)},
      {"--spool_dir", absl::GetFlag(FLAGS_spool_dir)}};
  for (const auto& [flag, path] : private_paths) {
    if (!path.empty() && IsInside(path, config.runtime_dir)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, "=", path, " is inside --runtime_dir=", config.runtime_dir,
          ", which --csi_socket mounts into pods: move it out (the Kubernetes DaemonSet uses "
          "--grpc_socket=/run/profd-ctl/profd.sock and --capture_dir=/var/lib/profd/captures)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config config;
  config.runtime_dir = absl::GetFlag(FLAGS_runtime_dir);
  config.agent_socket = absl::GetFlag(FLAGS_agent_socket);
  if (config.agent_socket.empty()) config.agent_socket = config.runtime_dir + "/agent.sock";
  config.grpc_socket = absl::GetFlag(FLAGS_grpc_socket);
  if (config.grpc_socket.empty()) config.grpc_socket = config.runtime_dir + "/profd.sock";
  config.listener_flags = ListenerFlagsFromFlags();
  absl::StatusOr<ListenerConfig> listener = DecideListenerConfig(config.listener_flags);
  if (!listener.ok()) return listener.status();
  config.listener = *std::move(listener);
  config.hostname = Hostname();

  config.channel.socket_path = config.agent_socket;
  config.channel.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  config.channel.agent_timeout = absl::GetFlag(FLAGS_agent_timeout);
  if (absl::Status s = AgentChannelFlags(&config.channel); !s.ok()) return s;
  config.capture.hostname = config.hostname;
  if (absl::Status s = CaptureFlags(&config.capture); !s.ok()) return s;
  config.retention.hostname = config.hostname;
  if (absl::Status s = RetentionFlags(&config.retention); !s.ok()) return s;

  config.kineto_dir = absl::GetFlag(FLAGS_kineto_socket_dir);
  if (config.kineto_dir.empty()) config.kineto_dir = config.runtime_dir + "/kineto";
  if (config.kineto_dir != "none") {
    absl::StatusOr<uint64_t> max_trace =
        store::ParseByteSize(absl::GetFlag(FLAGS_kineto_max_trace_bytes));
    if (!max_trace.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kineto_max_trace_bytes: ", max_trace.status().message()));
    }
    config.capture.kineto_max_trace_bytes = *max_trace;
  }
  config.counters.cupti_library = absl::GetFlag(FLAGS_cupti_library);
  config.counters.interval = std::clamp(absl::GetFlag(FLAGS_gpu_counters_interval),
                                        absl::Microseconds(100), absl::Seconds(1));
  config.gpu.library_path = absl::GetFlag(FLAGS_nvml_library);
  config.gpu.interval =
      std::max(absl::GetFlag(FLAGS_nvml_sample_interval), absl::Milliseconds(100));
  config.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  if (absl::Status s = AlertFlags(&config); !s.ok()) return s;
  std::string node = absl::GetFlag(FLAGS_node_name);
  if (const char* env = std::getenv("NODE_NAME"); node.empty() && env != nullptr) node = env;
  if (node.empty()) node = config.hostname;
  absl::StatusOr<std::optional<PodDirectory::Options>> pods = PodDirectoryFlags(node);
  if (!pods.ok()) return pods.status();
  config.pods = *std::move(pods);
  absl::StatusOr<std::optional<KubernetesAuthorizer::Options>> authorization = AuthorizationFlags();
  if (!authorization.ok()) return authorization.status();
  config.authorization = *std::move(authorization);
  config.csi_socket = absl::GetFlag(FLAGS_csi_socket);
  config.csi.driver_name = absl::GetFlag(FLAGS_csi_driver_name);
  config.csi.node_id = node;
  config.csi.runtime_dir = config.runtime_dir;
  config.csi.kineto_dir = config.kineto_dir;
  config.csi.target_root =
      std::string(absl::StripSuffix(absl::GetFlag(FLAGS_csi_target_root), "/"));
  if (config.csi_socket != "none") {
    if (absl::Status s = CheckCsiFolders(config); !s.ok()) return s;
  }
  return config;
}

// The running daemon. Members are declared in the order they start, so they stop in reverse,
// each after what uses it. Main's thread calls every method.
class Daemon {
 public:
  Daemon(Config config, AccessGroup access)
      : config_(std::move(config)), access_(std::move(access)) {}

  // Starts every component; on an error, says what failed, and AbortStart undoes the rest.
  absl::Status Start(std::shared_ptr<grpc::ServerCredentials> tcp_credentials);
  void AbortStart();
  // After SIGTERM/SIGINT.
  void Stop();

 private:
  void OpenTraceStore();
  void ConnectCaptureOptions();
  absl::Status StartKineto();
  absl::Status StartMetricsServer();
  absl::Status StartAlertWebhook();
  absl::Status StartGrpc(std::shared_ptr<grpc::ServerCredentials> tcp_credentials);
  absl::Status StartCsi();
  void LogStarted() const;

  Config config_;
  const AccessGroup access_;
  DaemonIdentity identity_;
  AgentRegistry registry_;
  std::unique_ptr<PodDirectory> pods_;  // stops before the registry it resolves into
  std::unique_ptr<AgentChannelServer> channel_;
  std::unique_ptr<store::TraceStore> trace_store_;
  std::unique_ptr<store::Spool> spool_;  // the capture code submits finished captures here
  std::string store_error_;              // why there is no store
  // Capture and store components report into it (daemon/metrics/daemon_metrics.h).
  DaemonMetrics daemon_metrics_;
  std::unique_ptr<store::Retention> retention_;
  std::unique_ptr<kineto::KinetoIpcServer> kineto_server_;
  std::unique_ptr<CaptureTargets> targets_;
  std::unique_ptr<PmSampler> counter_sampler_;
  std::unique_ptr<CaptureOrchestrator> captures_;
  std::unique_ptr<GpuSampler> gpu_sampler_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<alerts::AlertWebhook> alert_webhook_;
  std::unique_ptr<HttpServer> alert_server_;  // after the webhook: it calls it
  std::unique_ptr<TcpListener> tcp_listener_;
  std::unique_ptr<store::TraceStoreService> store_service_;
  std::unique_ptr<KubernetesAuthorizer> authorizer_;
  std::unique_ptr<ProfdService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CsiVolumePublisher> csi_publisher_;
  std::unique_ptr<CsiIdentityService> csi_identity_;
  std::unique_ptr<CsiNodeService> csi_node_;
  std::unique_ptr<grpc::Server> csi_server_;  // null without --csi_socket
};

absl::Status Daemon::Start(std::shared_ptr<grpc::ServerCredentials> tcp_credentials) {
  identity_.hostname = config_.hostname;
  identity_.started = absl::Now();
  identity_.agent_socket = config_.agent_socket;
  if (config_.pods) {
    pods_ = std::make_unique<PodDirectory>(*config_.pods);
    registry_.set_pod_directory(pods_.get());
    pods_->Start([this] { registry_.ResolvePendingPods(); });
    LogInfo(kComponent, "pods verified: cgroup pod UID -> %s (--kubernetes_pods)",
            config_.pods->url);
  }
  channel_ = std::make_unique<AgentChannelServer>(config_.channel, &registry_);
  OpenTraceStore();
  ConnectCaptureOptions();
  retention_ =
      std::make_unique<store::Retention>(config_.retention, spool_.get(), trace_store_.get());
  retention_->Start();
  daemon_metrics_.SetRetentionSource([this] {
    auto of = [](const store::RetentionStats& s) {
      return DaemonMetrics::Snapshot::Retained{s.active, s.kept_bytes, s.pruned_total,
                                               s.pruned_bytes_total};
    };
    return std::pair{of(retention_->capture_dir_stats()), of(retention_->store_stats())};
  });
  if (absl::Status s = StartKineto(); !s.ok()) return s;
  targets_ = std::make_unique<CaptureTargets>(&registry_, kineto_server_.get(), identity_.hostname,
                                              config_.agent_socket);
  captures_ = std::make_unique<CaptureOrchestrator>(config_.capture, &registry_, channel_.get(),
                                                    targets_.get(), kineto_server_.get());
  channel_->set_event_sink(captures_.get());
  // Captures the previous profd never finished (killed mid-capture): repaired and listed.
  captures_->RecoverUnfinished();
  if (absl::Status s = channel_->Start(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot start the agent channel: ", s.ToString()));
  }
  gpu_sampler_ = std::make_unique<GpuSampler>(config_.gpu);
  gpu_sampler_->Start();
  // For /metrics with --gpu_counters; else started only for captures with --gpu-metrics.
  if (absl::GetFlag(FLAGS_gpu_counters)) counter_sampler_->Start();
  if (absl::Status s = StartMetricsServer(); !s.ok()) return s;
  if (absl::Status s = StartAlertWebhook(); !s.ok()) return s;
  if (absl::Status s = StartGrpc(std::move(tcp_credentials)); !s.ok()) return s;
  if (absl::Status s = StartCsi(); !s.ok()) return s;
  LogStarted();
  return absl::OkStatus();
}

// Opens the store and its spool; without them profd still serves agents and metrics, and the
// store calls answer with the reason.
void Daemon::OpenTraceStore() {
  store_error_ = OpenStore(identity_.hostname, access_, &trace_store_, &spool_);
  if (store_error_.empty()) {
    identity_.store_uri = trace_store_->uri();
    LogInfo(kComponent, "store %s, spool %s", trace_store_->uri(), spool_->dir());
  } else {
    LogError(kComponent, "no trace store, captures cannot be kept: %s", store_error_);
  }
}

// What the orchestrator calls: the spool, the metrics, the hardware-counter sampler.
void Daemon::ConnectCaptureOptions() {
  CaptureOptions& options = config_.capture;
  if (spool_) {
    // A full spool refuses new captures up front rather than losing them at the end.
    options.check_space = [this] { return spool_->CheckSpace(0); };
    // Every finished capture goes to the store through the spool (hard links, no second copy);
    // its folder in --capture_dir stays where profctl capture --output reads it.
    options.on_complete = [this](const v1::CaptureInfo& info,
                                 const std::string& folder) -> absl::StatusOr<std::string> {
      absl::StatusOr<v1::StoredTrace> queued =
          spool_->SubmitCopy(store::DescribeCapture(info), folder);
      if (!queued.ok()) return queued.status();
      return folder;
    };
    // profd_uploads_total and profd_trace_uploaded_bytes_total: what the spool really did.
    daemon_metrics_.SetUploadSource([this] {
      const store::SpoolStats s = spool_->stats();
      return DaemonMetrics::Uploads{s.uploaded_total, s.upload_failures_total,
                                    s.uploaded_bytes_total, s.write_failures_total,
                                    s.waiting_for_room};
    });
  }
  options.on_finished = [this](const v1::CaptureInfo& info) {
    daemon_metrics_.OnCaptureFinished(info);
  };
  if (config_.retention.store_limits.enabled() && trace_store_ && !trace_store_->is_local()) {
    LogWarning(kComponent,
               "--store_retention_*: %s is not a local store; set the bucket's lifecycle rules "
               "instead",
               trace_store_->uri());
  }
  counter_sampler_ = std::make_unique<PmSampler>(config_.counters);
  options.begin_gpu_metrics = [this](absl::Duration interval, PmSampler::CaptureSink sink,
                                     std::string* why) {
    return counter_sampler_->BeginCapture(interval, std::move(sink), why);
  };
  options.end_gpu_metrics = [this] { return counter_sampler_->EndCapture(); };
  options.await_gpu_metrics = [this](absl::Duration timeout) {
    counter_sampler_->AwaitCaptureStart(timeout);
  };
}

absl::Status Daemon::StartKineto() {
  if (config_.kineto_dir == "none") return absl::OkStatus();
  kineto_server_ = std::make_unique<kineto::KinetoIpcServer>(
      kineto::KinetoIpcOptions{.socket_dir = config_.kineto_dir});
  if (absl::Status s = kineto_server_->Start(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("cannot serve Kineto's daemon protocol: ", s.message()));
  }
  const std::string base_config = config_.runtime_dir + "/kineto.conf";
  if (absl::Status s =
          kineto::WriteKinetoBaseConfig(base_config, absl::GetFlag(FLAGS_kineto_poll_interval));
      !s.ok()) {
    LogWarning(kComponent, "%s: processes poll at Kineto's default (5 s)", s.message());
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartMetricsServer() {
  const std::string& address = config_.metrics_address;
  if (address == "none" || address.empty()) return absl::OkStatus();
  auto collector = std::make_shared<MetricsCollector>(MetricsCollector::Sources{
      identity_.hostname, &registry_, gpu_sampler_.get(), &daemon_metrics_,
      [this] { return channel_->counters(); },
      [this] { return static_cast<int64_t>(captures_->counts().running); },
      absl::GetFlag(FLAGS_gpu_counters) ? counter_sampler_.get() : nullptr});
  absl::StatusOr<std::unique_ptr<MetricsServer>> started =
      MetricsServer::Start(address, std::move(collector));
  if (!started.ok()) return started.status();
  metrics_server_ = *std::move(started);
  identity_.metrics_address = metrics_server_->address();
  return absl::OkStatus();
}

// Alertmanager's webhook: firing alerts start captures through the orchestrator, as profctl's do.
absl::Status Daemon::StartAlertWebhook() {
  const std::string& address = config_.alert_address;
  if (address == "none" || address.empty()) return absl::OkStatus();
  alerts::AlertWebhookOptions options = config_.alerts;
  // The processes on a GPU as /metrics labels them: what a rule on those series names.
  options.capture.pids_on_gpu = [this](uint32_t gpu, const std::string& pod_namespace,
                                       const std::string& pod) {
    const GpuIndex gpu_index(*gpu_sampler_->snapshot());
    std::vector<uint32_t> pids;
    for (const v1::AgentInfo& a : targets_->ListInfo()) {
      if ((!pod.empty() && a.pod_name() != pod) ||
          (!pod_namespace.empty() && !pod.empty() && a.pod_namespace() != pod_namespace)) {
        continue;
      }
      bool on = false;
      for (const v1::DeviceCounters& c : a.counters()) on |= gpu_index.Of(a, c.device()) == gpu;
      if (on) pids.push_back(a.pid());
    }
    return pids;
  };
  alerts::AlertCaptures captures;
  captures.start = [this](const v1::CaptureRequest& request) { return captures_->Start(request); };
  captures.is_running = [this](const std::string& id) {
    std::optional<v1::CaptureInfo> info = captures_->Get(id);
    return info.has_value() && !CaptureOrchestrator::Terminal(info->phase());
  };
  alert_webhook_ = std::make_unique<alerts::AlertWebhook>(std::move(options), std::move(captures));
  HttpServer::Options http;
  http.what = "the alert webhook";
  http.address_flag = "--alert_address";
  http.usual_port = 9478;
  // Alertmanager sends a group's alerts in one notification (~1 KiB each; its max_alerts caps
  // them): 1 MiB holds hundreds.
  http.max_body_bytes = 1 << 20;
  http.max_connections = 16;
  http.tls = config_.alert_tls;
  absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
      address,
      [webhook = alert_webhook_.get()](const HttpRequest& request) {
        return webhook->Handle(request);
      },
      http);
  if (!started.ok()) return started.status();
  alert_server_ = *std::move(started);
  daemon_metrics_.SetAlertSource([webhook = alert_webhook_.get(), server = alert_server_.get(),
                                  tls = !config_.alert_tls.cert_file.empty()] {
    DaemonMetrics::Snapshot::Alerts counts = webhook->counts();
    if (tls) counts.requests.emplace_back("tls_refused", server->tls_refused());
    return counts;
  });
  identity_.alert_address = alert_server_->address();
  return absl::OkStatus();
}

// The gRPC server on the unix socket and, when asked, TCP; the unix socket is opened to the
// access group only once the server runs.
absl::Status Daemon::StartGrpc(std::shared_ptr<grpc::ServerCredentials> tcp_credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // profd never sends more than profctl takes (profd/v1/control_limits.h).
  builder.SetMaxSendMessageSize(static_cast<int>(v1::kMaxControlMessageBytes));
  builder.SetMaxReceiveMessageSize(static_cast<int>(v1::kMaxControlRequestBytes));
  // gRPC's own deadline for the TLS handshake and the HTTP/2 preface (its default is 120 s).
  const absl::Duration handshake_timeout = config_.listener_flags.handshake_timeout;
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::clamp<int64_t>(
                                 absl::ToInt64Milliseconds(handshake_timeout), 1, INT32_MAX)));
  const std::string& grpc_socket = config_.grpc_socket;
  if (grpc_socket != "none") {
    unlink(grpc_socket.c_str());
    identity_.grpc_addresses.push_back("unix:" + grpc_socket);
  }
  // gRPC writes each selected port through its pointer at BuildAndStart: room for the TCP one too,
  // so that pushing it moves nothing.
  std::vector<int> bound_ports(identity_.grpc_addresses.size(), 0);
  bound_ports.reserve(bound_ports.size() + 1);
  for (size_t i = 0; i < identity_.grpc_addresses.size(); ++i) {
    builder.AddListeningPort(identity_.grpc_addresses[i], grpc::InsecureServerCredentials(),
                             &bound_ports[i]);
  }
  // TCP: profd accepts, and gRPC gets a connection once its client has spoken (TLS or not).
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> tcp_acceptor;
  const std::string& grpc_address = config_.listener_flags.address;
  if (config_.listener.serve_tcp()) {
    absl::StatusOr<std::unique_ptr<TcpListener>> listening = TcpListener::Listen(
        {grpc_address, handshake_timeout, absl::GetFlag(FLAGS_grpc_max_pending_connections)});
    if (!listening.ok()) return listening.status();
    tcp_listener_ = *std::move(listening);
    tcp_acceptor = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        std::move(tcp_credentials));
    identity_.grpc_addresses.push_back(grpc_address);
    bound_ports.push_back(tcp_listener_->port());
  }
  store_service_ = std::make_unique<store::TraceStoreService>(trace_store_.get(), spool_.get(),
                                                              identity_.hostname, store_error_);
  service_ = std::make_unique<ProfdService>(&identity_, &registry_, channel_.get(), captures_.get(),
                                            targets_.get());
  service_->set_gpu_sampler(gpu_sampler_.get());
  service_->set_counter_sampler(counter_sampler_.get());
  if (config_.authorization) {
    authorizer_ = std::make_unique<KubernetesAuthorizer>(*config_.authorization);
    service_->set_authorizer(authorizer_.get());
    LogInfo(kComponent,
            "captures over TCP: Kubernetes users allowed to create captures.profd.dev "
            "(%s)",
            config_.authorization->server);
  }
  builder.RegisterService(service_.get());
  builder.RegisterService(store_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ",
                                               absl::StrJoin(identity_.grpc_addresses, ", "),
                                               ": is another profd running?"));
  }
  for (size_t i = 0; i < identity_.grpc_addresses.size(); ++i) {
    if (bound_ports[i] == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", identity_.grpc_addresses[i],
                                                 " (in use, or not permitted)"));
    }
  }
  if (tcp_listener_ != nullptr) {
    tcp_listener_->Start(std::move(tcp_acceptor));
    LogInfo(kComponent,
            "TCP %s: a connection must send its TLS ClientHello within %s; at most %u wait "
            "(--grpc_handshake_timeout, --grpc_max_pending_connections)",
            grpc_address, absl::FormatDuration(handshake_timeout), tcp_listener_->max_pending());
  }
  if (grpc_socket != "none") {
    // Until here the socket had the umask's 0750: nobody but root could connect.
    if (absl::Status s = SecureControlSocket(grpc_socket, access_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The CSI node plugin, on its own socket: only the kubelet (root) reaches it, through the
// node-driver-registrar's registration; it shares nothing with profctl's control plane.
absl::Status Daemon::StartCsi() {
  const std::string& socket = config_.csi_socket;
  if (socket == "none") return absl::OkStatus();
  unlink(socket.c_str());
  csi_publisher_ = std::make_unique<CsiVolumePublisher>(config_.csi);
  csi_identity_ = std::make_unique<CsiIdentityService>(&csi_publisher_->options());
  csi_node_ = std::make_unique<CsiNodeService>(csi_publisher_.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(csi_identity_.get());
  builder.RegisterService(csi_node_.get());
  csi_server_ = builder.BuildAndStart();
  if (csi_server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve the CSI node plugin on ", socket,
                                               " (--csi_socket): is its folder there?"));
  }
  if (chmod(socket.c_str(), 0600) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot make ", socket, " root-only: ", std::strerror(errno)));
  }
  LogInfo(kComponent, "CSI node plugin %s on unix:%s: pods' volumes mounted under %s",
          config_.csi.driver_name, socket, config_.csi.target_root);
  return absl::OkStatus();
}

void Daemon::LogStarted() const {
  const std::string& mode = config_.listener.mode;
  LogInfo(kComponent, "profd %s on %s: gRPC %s%s; metrics %s; alerts %s", PROFD_VERSION,
          identity_.hostname, absl::StrJoin(identity_.grpc_addresses, ", "),
          mode.empty() ? "" : " (" + mode + ")",
          identity_.metrics_address.empty() ? "off"
                                            : "http://" + identity_.metrics_address + "/metrics",
          identity_.alert_address.empty()
              ? "off"
              : absl::StrCat("http://", identity_.alert_address, alerts::kWebhookPath));
  LogInfo(kComponent, "%s",
          access_.configured
              ? absl::StrCat("profctl and the trace folders: root and group ", access_.name,
                             " (gid ", access_.gid, ", --access_group)")
              : "profctl and the trace folders: root only (no --access_group)");
}

void Daemon::AbortStart() {
  if (csi_server_ != nullptr) csi_server_->Shutdown();
  if (server_ != nullptr) server_->Shutdown();
  if (channel_ != nullptr) channel_->Stop();
}

void Daemon::Stop() {
  // No store request may hold the shutdown: those in flight end now (an upload resumes from the
  // spool at the next start), so gRPC handlers, retention and the uploader return at once.
  if (trace_store_) trace_store_->Cancel();
  // Running captures end first, saying why, while their profctl streams can still be told.
  captures_->Shutdown();
  if (tcp_listener_ != nullptr) tcp_listener_->Stop();  // nothing new handed to a stopping server
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Mounts already made stay: the kubelet unmounts each pod's volume through the next profd.
  if (csi_server_ != nullptr) csi_server_->Shutdown();
  metrics_server_.reset();
  alert_server_.reset();  // no alert starts a capture from here on
  gpu_sampler_->Stop();
  counter_sampler_->Stop();
  channel_->Stop();
  if (config_.grpc_socket != "none") unlink(config_.grpc_socket.c_str());
  LogInfo(kComponent, "stopped");
}

void ParseFlags(int argc, char** argv) {
  // absl prints "profd: " before the message, and "Flags from FILE" over each file's flags:
  // profd's are all "profd", not the source path the build saw.
  absl::SetProgramUsageMessage(
      "on-demand GPU profiling daemon (profctl is its command line; README.md, docs/).");
  absl::FlagsUsageConfig usage;
  usage.normalize_filename = [](absl::string_view file) {
    return absl::StrContains(file, "daemon/") ? std::string("profd") : std::string(file);
  };
  usage.contains_help_flags = [](absl::string_view file) { return file == "profd"; };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.version_string = [] { return std::string("profd ") + PROFD_VERSION + "\n"; };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
}

// Every thread started from here on inherits this mask; main waits for the signals in it.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signals;
}

int Fail(const absl::Status& status) {
  LogError(kComponent, "%s", status.message());
  return 1;
}

int Main(int argc, char** argv) {
  HoldFreedMemoryBriefly();
  ParseFlags(argc, argv);
  const sigset_t signals = BlockStopSignals();
  // Checked before anything starts: a daemon that would be open to the network does not start.
  absl::StatusOr<Config> config = ConfigFromFlags();
  if (!config.ok()) return Fail(config.status());
  for (const std::string& warning : config->listener.warnings) {
    LogWarning(kComponent, "%s", warning);
  }
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials;
  if (config->listener.serve_tcp()) {
    auto credentials = ListenerCredentials(config->listener_flags, config->listener);
    if (!credentials.ok()) return Fail(credentials.status());
    tcp_credentials = *std::move(credentials);
  }
  // One profd per runtime folder, before it touches the sockets there.
  if (absl::StatusOr<int> lock = LockRuntimeDir(config->runtime_dir); !lock.ok()) {
    return Fail(lock.status());
  }
  // Access control and limits (docs/SECURITY.md), before any socket, file or thread exists.
  absl::StatusOr<AccessGroup> access = SetUpProcess(config->agent_socket, config->grpc_socket);
  if (!access.ok()) return Fail(access.status());

  Daemon daemon(*std::move(config), *std::move(access));
  if (absl::Status s = daemon.Start(std::move(tcp_credentials)); !s.ok()) {
    daemon.AbortStart();
    return Fail(s);
  }
  int received = 0;
  sigwait(&signals, &received);
  LogInfo(kComponent, "signal %d: shutting down", received);
  daemon.Stop();
  return 0;
}

}  // namespace
}  // namespace profd

int main(int argc, char** argv) { return profd::Main(argc, argv); }
