#include "daemon/metrics/metrics_collector.h"

#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "analysis/gpu_counters.h"

namespace profd {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

void Add(MetricFamily& family, Labels labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

Labels With(Labels labels, std::initializer_list<ClientMetric::Label> more) {
  labels.insert(labels.end(), more);
  return labels;
}

// The labels of a process series: who it is in Kubernetes terms, from its agent when it has one.
Labels ProcessLabels(const std::string& hostname, uint32_t pid, const v1::AgentInfo* agent,
                     const std::string& comm_without_agent) {
  if (agent == nullptr) {
    return {{"comm", comm_without_agent}, {"container", ""},
            {"hostname", hostname},       {"namespace", ""},
            {"pid", std::to_string(pid)}, {"pod", ""}};
  }
  return {{"comm", agent->comm()},      {"container", agent->container_name()},
          {"hostname", hostname},       {"namespace", agent->pod_namespace()},
          {"pid", std::to_string(pid)}, {"pod", agent->pod_name()}};
}

// How the process's agent counts launches: "entry-points", "cupti", "off", or for agents that
// sampled, "sampled-1/N".
std::string LaunchCountingLabel(const v1::AgentInfo& a) {
  switch (a.launch_counting()) {
    case v1::LAUNCH_COUNTING_ENTRY_POINTS:
      return "entry-points";
    case v1::LAUNCH_COUNTING_CUPTI:
      return "cupti";
    default:
      if (a.launch_sample_every() > 1) return absl::StrCat("sampled-1/", a.launch_sample_every());
      return a.launch_sample_every() == 1 ? "cupti" : "off";
  }
}

using Families = std::vector<MetricFamily>;

// One series with the host's labels.
void AddHostSeries(Families* out, const char* name, const char* help, MetricType type,
                   const Labels& host, double value) {
  MetricFamily f = Family(name, help, type);
  Add(f, host, value);
  out->push_back(std::move(f));
}

// profd itself and its agent socket. Every reason is always present (0 until it happens), so
// rate() and alerts see it at once.
void AddDaemonFamilies(const Labels& host, size_t agents, const AgentChannelCounters& channel,
                       Families* out) {
  MetricFamily build = Family("profd_build_info", "profd's version; always 1", MetricType::Gauge);
  Add(build, With(host, {{"version", PROFD_VERSION}}), 1);
  out->push_back(std::move(build));
  AddHostSeries(out, "profd_agents_connected", "Processes with an agent connected to this profd",
                MetricType::Gauge, host, static_cast<double>(agents));
  AddHostSeries(out, "profd_agent_connections",
                "Connections open on the agent socket, with or without a hello", MetricType::Gauge,
                host, static_cast<double>(channel.connections));
  AddHostSeries(out, "profd_agent_connections_paused",
                "Agent connections profd is not reading now: their capture's backlog is full, or "
                "their next frame waits for room in the read buffers",
                MetricType::Gauge, host, static_cast<double>(channel.paused));
  AddHostSeries(out, "profd_agent_buffered_bytes",
                "Bytes of agent frames being read (--agent_max_buffered_bytes)", MetricType::Gauge,
                host, static_cast<double>(channel.buffered_bytes));
  AddHostSeries(out, "profd_agent_backlog_bytes",
                "Bytes of event batches waiting for their capture to write them "
                "(--agent_max_backlog_bytes)",
                MetricType::Gauge, host, static_cast<double>(channel.backlog_bytes));
  MetricFamily protocol_errors =
      Family("profd_agent_protocol_errors_total",
             "Agent connections closed for cause, by reason (frame_too_large, malformed, "
             "over_limit, invalid_field, no_hello, flood, not_reading, peer_exited)",
             MetricType::Counter);
  for (int r = 0; r < kAgentViolationCount; ++r) {
    Add(protocol_errors,
        With(host, {{"reason", AgentViolationLabel(static_cast<AgentViolation>(r))}}),
        static_cast<double>(channel.closed_for_cause[r]));
  }
  out->push_back(std::move(protocol_errors));
  MetricFamily rejected =
      Family("profd_agent_connections_rejected_total",
             "Agent connections closed as soon as accepted, by reason (max_connections, "
             "uid_share, no_identity, no_file_descriptors)",
             MetricType::Counter);
  for (int r = 0; r < kAgentRejectionCount; ++r) {
    Add(rejected, With(host, {{"reason", AgentRejectionLabel(static_cast<AgentRejection>(r))}}),
        static_cast<double>(channel.rejected[r]));
  }
  out->push_back(std::move(rejected));
}

MetricFamily DurationHistogram(const Labels& host, const DaemonMetrics::Snapshot& daemon) {
  MetricFamily duration =
      Family("profd_capture_duration_seconds", "Time from a capture request to its final state",
             MetricType::Histogram);
  ClientMetric metric;
  metric.label = host;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < DaemonMetrics::kDurationBuckets.size(); ++i) {
    cumulative += daemon.duration_bucket_counts[i];
    metric.histogram.bucket.push_back({cumulative, DaemonMetrics::kDurationBuckets[i]});
  }
  metric.histogram.bucket.push_back(
      {daemon.duration_count, std::numeric_limits<double>::infinity()});
  metric.histogram.sample_count = daemon.duration_count;
  metric.histogram.sample_sum = daemon.duration_sum_seconds;
  duration.metric.push_back(std::move(metric));
  return duration;
}

// Captures, what they wrote and uploaded, and the spool.
void AddCaptureFamilies(const Labels& host, const DaemonMetrics::Snapshot& daemon,
                        int64_t captures_running, Families* out) {
  MetricFamily captures =
      Family("profd_captures_total", "Captures finished, by result (succeeded, failed, cancelled)",
             MetricType::Counter);
  for (int r = 0; r < kCaptureResultCount; ++r) {
    Add(captures, With(host, {{"result", CaptureResultLabel(static_cast<CaptureResult>(r))}}),
        static_cast<double>(daemon.captures_by_result[r]));
  }
  out->push_back(std::move(captures));
  AddHostSeries(out, "profd_captures_running", "Captures in progress", MetricType::Gauge, host,
                static_cast<double>(captures_running));
  out->push_back(DurationHistogram(host, daemon));
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    AddHostSeries(out, name, help, MetricType::Counter, host, static_cast<double>(value));
  };
  counter("profd_capture_events_total", "Trace events received from agents in captures",
          daemon.events);
  counter("profd_capture_dropped_records_total",
          "CUPTI records lost in captures (buffers full), as the agents reported",
          daemon.dropped_records);
  counter("profd_trace_written_bytes_total",
          "Bytes of trace files written to the local spool or store", daemon.trace_bytes_written);
  counter("profd_trace_uploaded_bytes_total", "Bytes of trace files uploaded to the remote store",
          daemon.trace_bytes_uploaded);
  MetricFamily uploads = Family("profd_uploads_total",
                                "Upload attempts of trace objects, by result (succeeded, failed)",
                                MetricType::Counter);
  Add(uploads, With(host, {{"result", "succeeded"}}),
      static_cast<double>(daemon.uploads_succeeded));
  Add(uploads, With(host, {{"result", "failed"}}), static_cast<double>(daemon.uploads_failed));
  out->push_back(std::move(uploads));
  counter("profd_spool_write_failures_total",
          "Attempts to put a finished capture into the spool that failed (disk full, write "
          "error, over --spool_max_bytes); each retry counts",
          daemon.spool_write_failures);
  AddHostSeries(out, "profd_spool_captures_waiting_for_room",
                "Finished captures the spool could not take yet, kept in --capture_dir and "
                "retried: not in the store until this is 0",
                MetricType::Gauge, host, static_cast<double>(daemon.spool_waiting_for_room));
}

// The Alertmanager webhook's requests and decisions: only while it listens (--alert_address).
void AddAlertFamilies(const Labels& host, const DaemonMetrics::Snapshot::Alerts& alerts,
                      Families* out) {
  if (!alerts.active) return;
  MetricFamily requests = Family(
      "profd_alert_webhook_requests_total",
      "Requests to the Alertmanager webhook, by result (accepted, unauthorized: no or a wrong "
      "bearer token, bad_request: not a notification profd reads, not_found, "
      "method_not_allowed, tls_refused: a TLS handshake that failed, e.g. no or an untrusted "
      "client certificate)",
      MetricType::Counter);
  for (const auto& [result, count] : alerts.requests) {
    Add(requests, With(host, {{"result", result}}), static_cast<double>(count));
  }
  MetricFamily decisions =
      Family("profd_alert_decisions_total",
             "Alerts received, by what profd did (started a capture, deduplicated, cooled_down, "
             "rate_limited, refused, resolved)",
             MetricType::Counter);
  for (const auto& [decision, count] : alerts.decisions) {
    Add(decisions, With(host, {{"decision", decision}}), static_cast<double>(count));
  }
  out->push_back(std::move(requests));
  out->push_back(std::move(decisions));
}

// Retention, per place (capture_dir; store for a local store with a cap): only where it runs.
void AddRetentionFamilies(const Labels& host, const DaemonMetrics::Snapshot& daemon,
                          Families* out) {
  MetricFamily kept = Family("profd_retention_kept_bytes",
                             "Bytes of captures kept after the last retention sweep, by place "
                             "(capture_dir, store)",
                             MetricType::Gauge);
  MetricFamily pruned =
      Family("profd_retention_pruned_total",
             "Captures deleted by retention (age or size cap), by place", MetricType::Counter);
  MetricFamily pruned_bytes =
      Family("profd_retention_pruned_bytes_total",
             "Bytes of the captures deleted by retention, by place", MetricType::Counter);
  for (const auto& [place, r] :
       {std::pair{"capture_dir", daemon.capture_dir}, std::pair{"store", daemon.store}}) {
    if (!r.active) continue;
    Add(kept, With(host, {{"place", place}}), static_cast<double>(r.kept_bytes));
    Add(pruned, With(host, {{"place", place}}), static_cast<double>(r.pruned));
    Add(pruned_bytes, With(host, {{"place", place}}), static_cast<double>(r.pruned_bytes));
  }
  for (MetricFamily* f : {&kept, &pruned, &pruned_bytes}) out->push_back(std::move(*f));
}

// GPUs and the processes on them, from NVML; whether NVML is there, and its failed calls.
void AddNvmlFamilies(const std::string& hostname, const GpuSnapshot& gpus,
                     const std::unordered_map<uint32_t, const v1::AgentInfo*>& agent_of_pid,
                     Families* out) {
  const Labels host = {{"hostname", hostname}};
  AddHostSeries(out, "profd_nvml_available",
                "1 when NVML is loaded and GPU metrics are sampled; 0 when not (see profd's log or "
                "`profctl status` for why)",
                MetricType::Gauge, host, gpus.nvml_available ? 1 : 0);
  MetricFamily nvml_errors =
      Family("profd_nvml_errors_total", "Failed NVML calls, by entry point", MetricType::Counter);
  for (const auto& [call, count] : gpus.errors_by_call) {
    Add(nvml_errors, With(host, {{"call", call}}), static_cast<double>(count));
  }
  out->push_back(std::move(nvml_errors));

  MetricFamily gpu_util = Family("profd_gpu_utilization_ratio",
                                 "Fraction of the last sampler interval (--nvml_sample_interval) "
                                 "in which a kernel ran: the mean of NVML's samples",
                                 MetricType::Gauge);
  MetricFamily gpu_bw = Family("profd_gpu_memory_bandwidth_utilization_ratio",
                               "Fraction of the last sampler interval in which device memory was "
                               "read or written: the mean of NVML's samples",
                               MetricType::Gauge);
  MetricFamily gpu_busy = Family("profd_gpu_busy_seconds_total",
                                 "Seconds in which a kernel ran, from NVML's samples: rate() is "
                                 "the utilization over any range",
                                 MetricType::Counter);
  MetricFamily gpu_bw_busy = Family("profd_gpu_memory_bandwidth_busy_seconds_total",
                                    "Seconds in which device memory was read or written, from "
                                    "NVML's samples",
                                    MetricType::Counter);
  MetricFamily gpu_used =
      Family("profd_gpu_memory_used_bytes", "Device memory in use (NVML)", MetricType::Gauge);
  MetricFamily gpu_total =
      Family("profd_gpu_memory_total_bytes", "Device memory installed (NVML)", MetricType::Gauge);
  MetricFamily proc_used =
      Family("profd_process_gpu_memory_used_bytes",
             "Device memory a process holds on a GPU, context and allocator caches included "
             "(NVML)",
             MetricType::Gauge);
  MetricFamily proc_sm =
      Family("profd_process_sm_utilization_ratio",
             "Fraction of the GPU's SM time a process used over the last sample interval (NVML)",
             MetricType::Gauge);
  for (const GpuSample& g : gpus.gpus) {
    const std::string index = std::to_string(g.index);
    const Labels device = {
        {"gpu", index}, {"hostname", hostname}, {"model", g.model}, {"uuid", g.uuid}};
    if (g.utilization) Add(gpu_util, device, *g.utilization);
    if (g.memory_bandwidth_utilization) Add(gpu_bw, device, *g.memory_bandwidth_utilization);
    if (g.busy_seconds_total) Add(gpu_busy, device, *g.busy_seconds_total);
    if (g.memory_bandwidth_busy_seconds_total) {
      Add(gpu_bw_busy, device, *g.memory_bandwidth_busy_seconds_total);
    }
    if (g.memory_used_bytes) Add(gpu_used, device, static_cast<double>(*g.memory_used_bytes));
    if (g.memory_total_bytes) Add(gpu_total, device, static_cast<double>(*g.memory_total_bytes));
    for (const GpuProcessSample& p : g.processes) {
      auto agent = agent_of_pid.find(p.pid);
      Labels labels =
          With(ProcessLabels(hostname, p.pid, agent == agent_of_pid.end() ? nullptr : agent->second,
                             p.comm),
               {{"gpu", index}});
      if (p.memory_used_bytes) Add(proc_used, labels, static_cast<double>(*p.memory_used_bytes));
      if (p.sm_utilization) Add(proc_sm, std::move(labels), *p.sm_utilization);
    }
  }
  for (MetricFamily* f :
       {&gpu_util, &gpu_bw, &gpu_busy, &gpu_bw_busy, &gpu_used, &gpu_total, &proc_used, &proc_sm}) {
    out->push_back(std::move(*f));
  }
}

// GPUs' hardware counters (CUPTI PM sampling), labelled as the NVML series of the same GPU.
void AddHardwareCounterFamilies(const std::string& hostname, const GpuCounterSnapshot& counters,
                                const GpuSnapshot& gpus, Families* out) {
  AddHostSeries(out, "profd_gpu_counters_available",
                "1 when profd samples the GPUs' hardware counters (profd_gpu_sm_active_ratio, "
                "...); 0 when not (profd's log says why once: not root, MIG, another profiler, no "
                "CUPTI)",
                MetricType::Gauge, {{"hostname", hostname}}, counters.available ? 1 : 0);
  const auto defs = GpuCounterDefs();
  std::vector<MetricFamily> families;
  for (const GpuCounterDef& def : defs) {
    families.push_back(Family(def.series, def.help, MetricType::Gauge));
  }
  for (const GpuCounterSample& g : counters.gpus) {
    Labels device = {{"gpu", std::to_string(g.cuda_index)},
                     {"hostname", hostname},
                     {"model", g.name},
                     {"uuid", g.uuid}};
    for (const GpuSample& n : gpus.gpus) {  // NVML numbers GPUs as nvidia-smi does
      if (n.uuid == g.uuid) device[0].value = std::to_string(n.index);
    }
    for (size_t d = 0; d < defs.size() && d < g.values.size(); ++d) {
      if (!std::isnan(g.values[d])) Add(families[d], device, g.values[d]);
    }
  }
  for (MetricFamily& f : families) out->push_back(std::move(f));
}

// Processes, from their agents' heartbeats.
void AddProcessFamilies(const std::string& hostname, const std::vector<v1::AgentInfo>& agents,
                        const GpuSnapshot& gpus, Families* out) {
  const GpuIndex gpu_index(gpus);
  MetricFamily info =
      Family("profd_process_info", "One series per process with a connected agent; always 1",
             MetricType::Gauge);
  MetricFamily counters_paused = Family(
      "profd_process_counters_paused",
      "1 while the process's own profiler (torch.profiler, Nsight) traces and the agent's CUPTI "
      "counting callbacks step aside for it (launch_counting=\"cupti\" only): launches and "
      "allocations meanwhile are not counted",
      MetricType::Gauge);
  MetricFamily launches =
      Family("profd_process_kernel_launches_total",
             "Kernel launches since the agent started, CUDA graphs excluded", MetricType::Counter);
  MetricFamily graphs = Family("profd_process_graph_launches_total",
                               "CUDA graph launches since the agent started", MetricType::Counter);
  MetricFamily allocated =
      Family("profd_process_memory_allocated_bytes",
             "Device memory the process has allocated now (agent)", MetricType::Gauge);
  MetricFamily peak = Family("profd_process_memory_allocated_peak_bytes",
                             "Most device memory the process had allocated at once since it "
                             "started (agent)",
                             MetricType::Gauge);
  for (const v1::AgentInfo& a : agents) {
    const Labels process = ProcessLabels(hostname, a.pid(), &a, "");
    Add(info,
        With(process, {{"agent_version", a.agent_version()},
                       {"injected", a.injected() ? "true" : "false"},
                       {"launch_counting", LaunchCountingLabel(a)}}),
        1);
    if (a.launch_counting() == v1::LAUNCH_COUNTING_CUPTI) {
      Add(counters_paused, process, a.counters_paused() ? 1 : 0);
    }
    for (const v1::DeviceCounters& c : a.counters()) {
      // No uuid label on process series: it is on the GPU series, joined on (hostname, gpu),
      // and leaving it out keeps the exposition with 64 agents x 8 GPUs ~20% smaller.
      const std::string gpu = std::to_string(gpu_index.Of(a, c.device()));
      Labels labels = With(process, {{"gpu", gpu}});
      Add(launches, labels, static_cast<double>(c.kernel_launches()));
      Add(graphs, labels, static_cast<double>(c.graph_launches()));
      Add(allocated, labels, static_cast<double>(c.memory_allocated_bytes()));
      Add(peak, std::move(labels), static_cast<double>(c.memory_peak_bytes()));
    }
  }
  for (MetricFamily* f : {&info, &counters_paused, &launches, &graphs, &allocated, &peak}) {
    out->push_back(std::move(*f));
  }
}

}  // namespace

MetricsCollector::MetricsCollector(Sources sources) : sources_(std::move(sources)) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  const std::string& hostname = sources_.hostname;
  const Labels host = {{"hostname", hostname}};

  // Snapshots first; everything below works on these copies without locks.
  std::vector<v1::AgentInfo> agents;
  if (sources_.registry != nullptr) agents = sources_.registry->List();
  std::shared_ptr<const GpuSnapshot> gpus =
      sources_.gpus != nullptr ? sources_.gpus->snapshot() : std::make_shared<const GpuSnapshot>();
  DaemonMetrics::Snapshot daemon;
  if (sources_.daemon != nullptr) daemon = sources_.daemon->Read();
  const AgentChannelCounters channel =
      sources_.agent_channel ? sources_.agent_channel() : AgentChannelCounters{};
  const int64_t captures_running =
      sources_.captures_running ? sources_.captures_running() : daemon.captures_running;
  std::unordered_map<uint32_t, const v1::AgentInfo*> agent_of_pid;
  for (const v1::AgentInfo& a : agents) agent_of_pid[a.pid()] = &a;

  Families out;
  AddDaemonFamilies(host, agents.size(), channel, &out);
  AddCaptureFamilies(host, daemon, captures_running, &out);
  AddRetentionFamilies(host, daemon, &out);
  AddAlertFamilies(host, daemon.alerts, &out);
  AddNvmlFamilies(hostname, *gpus, agent_of_pid, &out);
  if (sources_.counters != nullptr) {
    AddHardwareCounterFamilies(hostname, *sources_.counters->snapshot(), *gpus, &out);
  }
  AddProcessFamilies(hostname, agents, *gpus, &out);
  // A family without series would still print its HELP and TYPE; leave it out instead.
  std::erase_if(out, [](const MetricFamily& f) { return f.metric.empty(); });
  return out;
}

}  // namespace profd
