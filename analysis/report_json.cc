// ReportToJson / WriteReportJson: the report's JSON form (summary.json, profctl report --json).
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "analysis/analysis.h"
#include "analysis/gpu_counters.h"
#include "common/atomic_file.h"
#include "common/printable.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace profd::analysis {
namespace {

template <typename W>
void Str(W& w, const char* key, const std::string& v) {
  w.Key(key);
  w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
}
template <typename W>
void I64(W& w, const char* key, int64_t v) {
  w.Key(key);
  w.Int64(v);
}
template <typename W>
void U64(W& w, const char* key, uint64_t v) {
  w.Key(key);
  w.Uint64(v);
}
template <typename W>
void Dbl(W& w, const char* key, double v) {
  w.Key(key);
  w.Double(std::isfinite(v) ? v : 0);
}

template <typename W>
void WriteFindings(W& w, const std::vector<Finding>& findings) {
  w.StartArray();
  for (const Finding& f : findings) {
    w.StartObject();
    Str(w, "id", f.id);
    Str(w, "severity", f.severity);
    Str(w, "title", f.title);
    Str(w, "threshold", f.threshold);
    Dbl(w, "value", f.value);
    w.Key("evidence");
    w.StartArray();
    for (const std::string& e : f.evidence) w.String(e.c_str());
    w.EndArray();
    w.Key("advice");
    w.StartArray();
    for (const std::string& a : f.advice) w.String(a.c_str());
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Stats(W& w, const DurationStats& s) {
  U64(w, "instances", s.count);
  I64(w, "total_ns", s.total_ns);
  Dbl(w, "avg_ns", s.avg_ns);
  Dbl(w, "med_ns", s.median_ns);
  I64(w, "min_ns", s.min_ns);
  I64(w, "max_ns", s.max_ns);
  Dbl(w, "stddev_ns", s.stddev_ns);
}

template <typename W>
void Launchers(W& w, const char* key, const std::vector<OperatorLaunches>& ops) {
  w.Key(key);
  w.StartArray();
  for (const OperatorLaunches& l : ops) {
    w.StartObject();
    Str(w, "name", l.name);
    U64(w, "kernels", l.kernels);
    I64(w, "total_ns", l.total_ns);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Operators(W& w, const Report& r) {
  const OperatorSummary& s = r.operator_summary;
  w.Key("operator_summary");
  w.StartObject();
  U64(w, "instances", s.instances);
  U64(w, "distinct", s.distinct);
  I64(w, "self_cpu_total_ns", s.self_cpu_total_ns);
  I64(w, "self_cuda_total_ns", s.self_cuda_total_ns);
  U64(w, "device_events", s.device_events);
  U64(w, "device_events_attributed", s.device_events_attributed);
  U64(w, "attributed_by_launch_call", s.attributed_by_launch_call);
  w.EndObject();
  w.Key("operators");
  w.StartArray();
  for (const OperatorRow& o : r.operators) {
    w.StartObject();
    Str(w, "name", o.name);
    w.Key("user_annotation");
    w.Bool(o.user_annotation);
    U64(w, "calls", o.calls);
    I64(w, "self_cpu_ns", o.self_cpu_ns);
    I64(w, "cpu_total_ns", o.cpu_total_ns);
    I64(w, "self_cuda_ns", o.self_cuda_ns);
    I64(w, "cuda_total_ns", o.cuda_total_ns);
    Dbl(w, "cpu_per_call_ns", o.cpu_per_call_ns);
    Dbl(w, "cuda_per_call_ns", o.cuda_per_call_ns);
    U64(w, "device_events_self", o.device_events_self);
    U64(w, "device_events", o.device_events);
    Dbl(w, "kernels_per_call", o.kernels_per_call);
    U64(w, "distinct_kernels", o.distinct_kernels);
    w.Key("kernels");
    w.StartArray();
    for (const OperatorKernel& k : o.kernels) {
      w.StartObject();
      Str(w, "name", k.name);
      U64(w, "count", k.count);
      I64(w, "total_ns", k.total_ns);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Inputs(W& w, const Report& r) {
  w.Key("inputs");
  w.StartArray();
  for (const InputSummary& in : r.inputs) {
    w.StartObject();
    Str(w, "path", in.path);
    Str(w, "format", in.format);
    w.Key("gzip");
    w.Bool(in.gzip);
    U64(w, "json_bytes", in.bytes);
    U64(w, "events", in.events);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Totals(W& w, const Report& r) {
  I64(w, "window_start_ns", r.window_start_ns);
  I64(w, "window_ns", r.window_ns);
  U64(w, "events", r.events);
  U64(w, "invalid_events", r.invalid_events);
  U64(w, "impossible_launches", r.impossible_launches);
  U64(w, "kernel_count", r.kernel_count);
  I64(w, "kernel_time_ns", r.kernel_time_ns);
  U64(w, "distinct_kernels", r.distinct_kernels);
  I64(w, "api_time_ns", r.api_time_ns);
  // Past the analysis's caps on distinct names: the events counted in the one row named
  // "[other names]" (top_kernels, apis), and at least how many names went there.
  U64(w, "folded_kernels", r.folded_kernels);
  U64(w, "folded_api_calls", r.folded_api_calls);
  U64(w, "folded_names", r.folded_names);
  // Hardware counter samples behind top_kernels[].counters (0 without --gpu-metrics).
  U64(w, "counter_samples", r.counter_samples);
  I64(w, "counter_interval_ns", r.counter_interval_ns);
}

template <typename W>
void Devices(W& w, const Report& r) {
  w.Key("devices");
  w.StartArray();
  for (const DeviceSummary& d : r.devices) {
    w.StartObject();
    I64(w, "id", d.id);
    Str(w, "name", d.name);
    U64(w, "num_sms", d.num_sms);
    w.Key("assumed");
    w.Bool(d.assumed);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Gpu(W& w, const GpuRow& g) {
  w.StartObject();
  I64(w, "pid", g.pid);
  I64(w, "device", g.device);
  Str(w, "device_name", g.device_name);
  I64(w, "busy_ns", g.busy_ns);
  Dbl(w, "busy_ratio", g.busy_ratio);
  I64(w, "copy_only_ns", g.copy_only_ns);
  I64(w, "idle_ns", g.idle_ns);
  w.Key("idle");
  w.StartObject();
  I64(w, "host_wait_ns", g.idle.host_wait_ns);
  I64(w, "kernel_wait_ns", g.idle.kernel_wait_ns);
  I64(w, "other_ns", g.idle.other_ns);
  w.EndObject();
  U64(w, "kernels", g.kernels);
  U64(w, "memcpys", g.memcpys);
  U64(w, "memsets", g.memsets);
  U64(w, "memcpy_bytes", g.memcpy_bytes);
  Dbl(w, "launch_rate_per_s", g.launch_rate_per_s);
  Dbl(w, "median_kernel_ns", g.median_kernel_ns);
  U64(w, "kernels_with_launch", g.kernels_with_launch);
  U64(w, "kernels_shorter_than_launch", g.kernels_shorter_than_launch);
  w.Key("launch_delay_ns");
  w.StartObject();
  I64(w, "p50", g.launch_delay_p50_ns);
  I64(w, "p90", g.launch_delay_p90_ns);
  I64(w, "p99", g.launch_delay_p99_ns);
  w.EndObject();
  w.Key("busy_timeline");
  w.StartArray();
  for (double v : g.busy_timeline) w.Double(v);
  w.EndArray();
  Launchers(w, "short_kernel_operators", g.short_kernel_operators);
  w.EndObject();
}

template <typename W>
void Processes(W& w, const Report& r) {
  w.Key("processes");
  w.StartArray();
  for (const ProcessRow& p : r.processes) {
    w.StartObject();
    I64(w, "pid", p.pid);
    U64(w, "api_calls", p.api_calls);
    I64(w, "api_ns", p.api_ns);
    U64(w, "kernels", p.kernels);
    Dbl(w, "launch_rate_per_s", p.launch_rate_per_s);
    I64(w, "sync_ns", p.sync_ns);
    w.Key("devices");
    w.StartArray();
    for (int32_t d : p.devices) w.Int(d);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Kernel(W& w, const KernelRow& k) {
  w.StartObject();
  Str(w, "name", k.name);
  Dbl(w, "time_ratio", k.time_ratio);
  Stats(w, k.stats);
  Dbl(w, "est_occupancy", k.est_occupancy);
  Dbl(w, "theoretical_occupancy", k.theoretical_occupancy);
  Str(w, "occupancy_limiter", k.occupancy_limiter);
  Str(w, "launch_config", k.launch_config);
  Launchers(w, "operators", k.operators);
  // Hardware counters over its running time, by their trace names; only the measured ones.
  if (k.counter_time_ns > 0) {
    w.Key("counters");
    w.StartObject();
    for (size_t i = 0; i < kGpuCounters; ++i) {
      if (!std::isfinite(k.counters[i])) continue;
      std::string_view name = GpuCounterTraceName(i);
      w.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
      w.Double(k.counters[i]);
    }
    w.EndObject();
  }
  I64(w, "counter_time_ns", k.counter_time_ns);
  Str(w, "bound", k.bound);
  Str(w, "bound_reason", k.bound_reason);
  w.EndObject();
}

template <typename W>
void Apis(W& w, const Report& r) {
  w.Key("cuda_api");
  w.StartArray();
  for (const ApiRow& a : r.apis) {
    w.StartObject();
    Str(w, "name", a.name);
    Dbl(w, "time_ratio", a.time_ratio);
    Stats(w, a.stats);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Copies(W& w, const Report& r) {
  w.Key("copies");
  w.StartArray();
  for (const CopyRow& c : r.copies) {
    w.StartObject();
    Str(w, "kind", c.kind);
    Str(w, "memory", c.memory);
    U64(w, "count", c.count);
    U64(w, "bytes", c.bytes);
    I64(w, "total_ns", c.total_ns);
    Dbl(w, "bandwidth_gbps", c.bandwidth_gbps);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Syncs(W& w, const Report& r) {
  w.Key("synchronization");
  w.StartArray();
  for (const SyncRow& s : r.syncs) {
    w.StartObject();
    Str(w, "kind", s.kind);
    Str(w, "source", s.source);
    U64(w, "count", s.count);
    I64(w, "total_ns", s.total_ns);
    I64(w, "max_ns", s.max_ns);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void LaunchDelay(W& w, const Report& r) {
  w.Key("launch_delay");
  w.StartObject();
  I64(w, "p50_ns", r.launch_delay_p50_ns);
  I64(w, "p90_ns", r.launch_delay_p90_ns);
  I64(w, "p99_ns", r.launch_delay_p99_ns);
  w.Key("histogram");
  w.StartArray();
  for (const HistogramBin& b : r.launch_delay_histogram) {
    w.StartObject();
    I64(w, "lo_ns", b.lo_ns);
    if (b.hi_ns != INT64_MAX) I64(w, "hi_ns", b.hi_ns);
    U64(w, "count", b.count);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

template <typename W>
void StreamQueues(W& w, const Report& r) {
  w.Key("stream_queues");
  w.StartArray();
  for (const StreamQueueRow& q : r.queues) {
    w.StartObject();
    I64(w, "pid", q.pid);
    I64(w, "device", q.device);
    I64(w, "stream", q.stream);
    U64(w, "kernels", q.kernels);
    U64(w, "max_depth", q.max_depth);
    Dbl(w, "avg_depth", q.avg_depth);
    w.EndObject();
  }
  w.EndArray();
}

template <typename W>
void Thresholds(W& w, const AnalysisOptions& o) {
  w.Key("thresholds");
  w.StartObject();
  Dbl(w, "idle_busy_below", o.idle_busy_below);
  U64(w, "launch_bound_min_kernels", o.launch_bound_min_kernels);
  Dbl(w, "launch_bound_busy_below", o.launch_bound_busy_below);
  Dbl(w, "launch_bound_short_fraction", o.launch_bound_short_fraction);
  I64(w, "launch_bound_median_kernel_ns", o.launch_bound_median_kernel_ns);
  I64(w, "kernel_wait_gap_ns", o.kernel_wait_gap_ns);
  Dbl(w, "copies_hot_path_fraction", o.copies_hot_path_fraction);
  U64(w, "pageable_min_copies", o.pageable_min_copies);
  U64(w, "pageable_min_bytes", o.pageable_min_bytes);
  Dbl(w, "sync_stall_fraction", o.sync_stall_fraction);
  I64(w, "dominant_top_n", o.dominant_top_n);
  Dbl(w, "dominant_fraction", o.dominant_fraction);
  Dbl(w, "low_occupancy_below", o.low_occupancy_below);
  Dbl(w, "low_occupancy_time_fraction", o.low_occupancy_time_fraction);
  Dbl(w, "bound_memory_dram", o.bound_memory_dram);
  Dbl(w, "bound_compute_tensor", o.bound_compute_tensor);
  Dbl(w, "bound_compute_sm", o.bound_compute_sm);
  I64(w, "bound_launch_kernel_ns", o.bound_launch_kernel_ns);
  w.EndObject();
}

template <typename W>
void Write(W& w, const Report& r) {
  w.StartObject();
  I64(w, "schema_version", 1);
  Inputs(w, r);
  Totals(w, r);
  Devices(w, r);

  w.Key("findings");
  WriteFindings(w, r.findings);

  w.Key("gpus");
  w.StartArray();
  for (const GpuRow& g : r.gpus) Gpu(w, g);
  w.EndArray();

  Processes(w, r);

  w.Key("top_kernels");
  w.StartArray();
  for (const KernelRow& k : r.top_kernels) Kernel(w, k);
  w.EndArray();

  Operators(w, r);
  Apis(w, r);
  Copies(w, r);
  Syncs(w, r);
  LaunchDelay(w, r);
  StreamQueues(w, r);

  w.Key("notes");
  w.StartArray();
  for (const std::string& n : r.notes) w.String(n.c_str());
  w.EndArray();

  Thresholds(w, r.options);
  w.EndObject();
}

}  // namespace

std::string ReportToJson(const Report& report, bool pretty) {
  rapidjson::StringBuffer buffer;
  if (pretty) {
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buffer);
    w.SetIndent(' ', 1);
    Write(w, report);
  } else {
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    Write(w, report);
  }
  // RapidJSON leaves U+2028/U+2029 raw: valid JSON, but line breaks to JavaScript and to tools
  // that read lines.
  return EscapeJsonLineSeparators(std::string(buffer.GetString(), buffer.GetSize()) + "\n");
}

absl::Status WriteReportJson(const Report& report, const std::string& path) {
  return WriteFileAtomically(path, ReportToJson(report));
}

}  // namespace profd::analysis

namespace profd::analysis {

std::string FindingsToJson(const std::vector<Finding>& findings) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  WriteFindings(w, findings);
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace profd::analysis
