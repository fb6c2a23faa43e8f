// Analyze(): the numbers of the report (definitions in docs/ANALYSIS.md). Findings are derived
// from them in findings.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/analysis/analysis.h"
#include "daemon/analysis/findings.h"
#include "daemon/analysis/occupancy.h"
#include "daemon/analysis/operator_table.h"
#include "daemon/analysis/trace_reader.h"
#include "daemon/checked_math.h"

namespace profd::analysis {
namespace {

struct Interval {
  int64_t start;
  int64_t end;
};

// Total length of the union of intervals (sorted by start).
int64_t UnionLength(const std::vector<Interval>& sorted) {
  int64_t total = 0, cur_start = 0, cur_end = INT64_MIN;
  for (const Interval& i : sorted) {
    if (i.start > cur_end) {
      if (cur_end != INT64_MIN) total += cur_end - cur_start;
      cur_start = i.start;
      cur_end = i.end;
    } else if (i.end > cur_end) {
      cur_end = i.end;
    }
  }
  if (cur_end != INT64_MIN) total += cur_end - cur_start;
  return total;
}

std::vector<Interval> Merge(const std::vector<Interval>& sorted) {
  std::vector<Interval> out;
  for (const Interval& i : sorted) {
    if (!out.empty() && i.start <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

// Reorders durations.
DurationStats StatsOf(std::vector<int64_t>& d) {
  DurationStats s;
  if (d.empty()) return s;
  std::sort(d.begin(), d.end());
  s.count = d.size();
  s.min_ns = d.front();
  s.max_ns = d.back();
  for (int64_t v : d) s.total_ns = SaturatingAdd(s.total_ns, v);
  s.avg_ns = static_cast<double>(s.total_ns) / s.count;
  size_t n = d.size();
  s.median_ns = n % 2 == 1
                    ? static_cast<double>(d[n / 2])
                    : (static_cast<double>(d[n / 2 - 1]) + static_cast<double>(d[n / 2])) / 2;
  if (n > 1) {
    double sq = 0;
    for (int64_t v : d) sq += (v - s.avg_ns) * (v - s.avg_ns);
    s.stddev_ns = std::sqrt(sq / static_cast<double>(n - 1));
  }
  return s;
}

// Nearest-rank percentile of sorted values: the smallest value with at least p of them <= it.
int64_t Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// "cuStreamSynchronize_v2" -> "cuStreamSynchronize"
std::string_view StripVersion(std::string_view name) {
  size_t v = name.rfind("_v");
  if (v != name.npos && v + 2 < name.size() &&
      std::all_of(name.begin() + v + 2, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return name.substr(0, v);
  }
  return name;
}

// Calls that block the calling host thread until the GPU catches up.
bool IsBlockingApi(std::string_view name) {
  name = StripVersion(name);
  static constexpr std::string_view kBlocking[] = {
      "cudaDeviceSynchronize", "cudaStreamSynchronize",
      "cudaEventSynchronize",  "cudaMemcpy",
      "cudaMemcpy2D",          "cudaMemcpy3D",
      "cuCtxSynchronize",      "cuStreamSynchronize",
      "cuEventSynchronize",    "cuMemcpyDtoH",
      "cuMemcpyHtoD",          "cuMemcpy",
      "cuMemcpyDtoD",          "cudaThreadSynchronize"};
  return std::find(std::begin(kBlocking), std::end(kBlocking), name) != std::end(kBlocking);
}

const char* HostSideMemory(const GpuActivity& a) {
  switch (a.copy_kind) {
    case CopyKind::kHtoD:
      return MemoryKindName(a.src_kind);
    case CopyKind::kDtoH:
      return MemoryKindName(a.dst_kind);
    case CopyKind::kHtoH:
      return MemoryKindName(a.src_kind);
    case CopyKind::kDtoD:
    case CopyKind::kPtoP:
      return "Device";
    case CopyKind::kUnknown:
      break;
  }
  return "unknown";
}

std::string ConfigText(const LaunchConfig& c) {
  return absl::StrFormat("grid [%u,%u,%u] block [%u,%u,%u] regs %u smem %u", c.grid[0], c.grid[1],
                         c.grid[2], c.block[0], c.block[1], c.block[2], c.registers_per_thread,
                         c.shared_memory_bytes);
}

// Whether everything Analyze reads of the trace is within the model's limits (trace_model.h):
// times, and ids that index the trace's tables. TraceReader only produces such traces; a Trace
// built by other code is checked here so that no caller can make the arithmetic overflow.
bool GpuActivityOk(const Trace& t, const GpuActivity& a) {
  return TimeWithinLimits(a.start_ns, a.dur_ns) && a.name < t.names.size() &&
         a.launch_config < t.launch_configs.size();
}
bool HostCallOk(const Trace& t, const HostCall& c) {
  return TimeWithinLimits(c.start_ns, c.dur_ns) && c.name < t.names.size();
}
bool CpuOpOk(const Trace& t, const CpuOp& o) {
  return TimeWithinLimits(o.start_ns, o.dur_ns) && o.name < t.names.size();
}

// The trace without the events that fail those checks; *dropped counts them.
Trace WithinLimits(const Trace& trace, uint64_t* dropped) {
  Trace t = trace;
  auto gpu_bad = [&](const GpuActivity& a) { return !GpuActivityOk(trace, a); };
  auto host_bad = [&](const HostCall& c) { return !HostCallOk(trace, c); };
  auto op_bad = [&](const CpuOp& o) { return !CpuOpOk(trace, o); };
  auto g = std::remove_if(t.gpu.begin(), t.gpu.end(), gpu_bad);
  auto h = std::remove_if(t.host.begin(), t.host.end(), host_bad);
  auto o = std::remove_if(t.ops.begin(), t.ops.end(), op_bad);
  *dropped = static_cast<uint64_t>((t.gpu.end() - g) + (t.host.end() - h) + (t.ops.end() - o));
  t.gpu.erase(g, t.gpu.end());
  t.host.erase(h, t.host.end());
  t.ops.erase(o, t.ops.end());
  auto clamp = [](int64_t v) {
    return std::clamp<int64_t>(v, kMinTimeNs, kMaxTimeNs + kMaxDurationNs);
  };
  if (t.window_start_ns <= t.window_end_ns) {
    t.window_start_ns = clamp(t.window_start_ns);
    t.window_end_ns = clamp(t.window_end_ns);
  }
  return t;
}

struct KernelAcc {
  std::vector<int64_t> durations;
  double occupancy_time = 0;  // sum of est. occupancy x duration over known launches
  double theoretical_time = 0;
  double known_time = 0;
  absl::flat_hash_map<uint32_t, uint64_t> configs;
  absl::flat_hash_map<uint32_t, OperatorLaunches> launchers;  // by operator row
};

}  // namespace

Report Analyze(const Trace& input, const AnalysisOptions& options) {
  bool ok =
      input.window_start_ns > input.window_end_ns ||
      (input.window_start_ns >= kMinTimeNs && input.window_end_ns <= kMaxTimeNs + kMaxDurationNs);
  for (const GpuActivity& a : input.gpu) ok = ok && GpuActivityOk(input, a);
  for (const HostCall& c : input.host) ok = ok && HostCallOk(input, c);
  for (const CpuOp& o : input.ops) ok = ok && CpuOpOk(input, o);
  uint64_t dropped = 0;
  Trace checked;
  if (!ok) checked = WithinLimits(input, &dropped);
  const Trace& trace = ok ? input : checked;

  Report r;
  r.options = options;
  for (const InputFile& f : trace.files) {
    r.inputs.push_back({f.path, f.format, f.gzip, f.bytes_read, f.events});
    r.events = SaturatingAdd(r.events, f.events);
    dropped = SaturatingAdd(dropped, f.invalid_events);
  }
  r.invalid_events = dropped;
  if (dropped > 0) {
    r.notes.push_back(absl::StrCat(
        dropped,
        " events skipped: impossible numbers (a time that is NaN, infinite or beyond 1897..2116, "
        "a negative or longer than 36-year duration, a negative size, an id that does not fit). "
        "The report covers the other events; the trace file is corrupt or was not written by a "
        "profiler."));
  }
  const int64_t ws = trace.window_end_ns >= trace.window_start_ns ? trace.window_start_ns : 0;
  const int64_t we = trace.window_end_ns >= trace.window_start_ns ? trace.window_end_ns : 0;
  const int64_t window = we - ws;
  const double window_s = window / 1e9;
  r.window_start_ns = ws;
  r.window_ns = window;

  // Launch calls by correlation id (the runtime call when both layers were recorded).
  absl::flat_hash_map<int64_t, uint32_t> launch_of;
  launch_of.reserve(trace.host.size());
  for (uint32_t i = 0; i < trace.host.size(); ++i) {
    const HostCall& c = trace.host[i];
    if (c.correlation < 0 || c.type == HostCall::Type::kSync) continue;
    auto [it, inserted] = launch_of.emplace(c.correlation, i);
    if (!inserted && c.type == HostCall::Type::kRuntime &&
        trace.host[it->second].type == HostCall::Type::kDriver) {
      it->second = i;
    }
  }
  auto launch_for = [&](const GpuActivity& a) -> const HostCall* {
    if (a.correlation < 0) return nullptr;
    auto it = launch_of.find(a.correlation);
    return it == launch_of.end() ? nullptr : &trace.host[it->second];
  };
  // The operator table, and which operator launched each GPU activity (for the kernel table and
  // the findings).
  OperatorAnalysis operators = AnalyzeOperators(trace, launch_of, options);
  auto launcher_of = [&](uint32_t gpu_index) {
    return gpu_index < operators.launched_by.size() ? operators.launched_by[gpu_index]
                                                    : OperatorAnalysis::kNoOperator;
  };
  // The top 3 of a count per operator row, as named OperatorLaunches.
  auto top_launchers = [&](const absl::flat_hash_map<uint32_t, OperatorLaunches>& by_row) {
    std::vector<OperatorLaunches> out;
    for (const auto& [row, l] : by_row) {
      out.push_back(l);
      out.back().name = operators.rows[row].name;
    }
    std::sort(out.begin(), out.end(), [](const OperatorLaunches& a, const OperatorLaunches& b) {
      return std::tie(b.kernels, b.total_ns, a.name) < std::tie(a.kernels, a.total_ns, b.name);
    });
    if (out.size() > 3) out.resize(3);
    return out;
  };

  auto pid_of = [&](const GpuActivity& a) -> int32_t {
    if (const HostCall* l = launch_for(a)) return l->pid;
    int32_t pid = a.file < trace.files.size() ? trace.files[a.file].host_pid : -1;
    return pid >= 0 ? pid : 0;
  };

  // Device properties: from the trace, or assumed.
  std::map<int32_t, DeviceProperties> props;
  std::map<int32_t, bool> assumed;
  for (const DeviceProperties& d : trace.devices) {
    std::string problem = DevicePropertiesProblem(d);
    if (problem.empty()) {
      props.emplace(d.id, d);
    } else if (props.emplace(d.id, DefaultDeviceProperties(d.id)).second) {
      assumed[d.id] = true;
      r.notes.push_back(absl::StrCat("deviceProperties of device ", d.id, " are impossible (",
                                     problem, "): they are ignored."));
    }
  }
  for (const GpuActivity& a : trace.gpu) {
    if (!props.count(a.device)) {
      props.emplace(a.device, DefaultDeviceProperties(a.device));
      assumed[a.device] = true;
    }
  }
  for (const auto& [id, p] : props) {
    bool used = std::any_of(trace.gpu.begin(), trace.gpu.end(),
                            [id = id](const GpuActivity& a) { return a.device == id; });
    if (!used && !trace.gpu.empty()) continue;
    r.devices.push_back({id, p.name, p.num_sms, assumed.count(id) > 0});
  }
  if (!assumed.empty()) {
    r.notes.push_back(
        "deviceProperties absent from the trace: occupancy estimated for an assumed H100/H200 "
        "SXM (132 SMs, 2048 threads, 64K registers, 228 KiB shared memory per SM).");
  }

  // Group GPU activity by (process, device) and by (process, device, stream).
  std::map<std::pair<int32_t, int32_t>, std::vector<uint32_t>> by_gpu;
  for (uint32_t i = 0; i < trace.gpu.size(); ++i) {
    by_gpu[{pid_of(trace.gpu[i]), trace.gpu[i].device}].push_back(i);
  }

  std::vector<int64_t> all_delays;
  uint64_t unmatched_kernels = 0;
  const int bins = std::max(1, options.timeline_bins);
  for (auto& [key, idx] : by_gpu) {
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
      return trace.gpu[a].start_ns < trace.gpu[b].start_ns;
    });
    GpuRow g;
    g.pid = key.first;
    g.device = key.second;
    g.device_name = props[key.second].name;
    std::vector<Interval> kernels, all;
    std::vector<int64_t> durations, delays;
    std::map<int32_t, std::vector<std::pair<int64_t, int>>> queue_events;  // by stream
    std::map<int32_t, uint64_t> stream_kernels;
    absl::flat_hash_map<uint32_t, OperatorLaunches> short_by_operator;
    for (uint32_t i : idx) {
      const GpuActivity& a = trace.gpu[i];
      all.push_back({a.start_ns, a.end_ns()});
      if (a.type == GpuActivity::Type::kMemcpy) ++g.memcpys;
      if (a.type == GpuActivity::Type::kMemset) ++g.memsets;
      if (a.type != GpuActivity::Type::kKernel) continue;
      ++g.kernels;
      if (a.dur_ns < options.launch_bound_median_kernel_ns &&
          launcher_of(i) != OperatorAnalysis::kNoOperator) {
        OperatorLaunches& l = short_by_operator[launcher_of(i)];
        ++l.kernels;
        l.total_ns = SaturatingAdd(l.total_ns, a.dur_ns);
      }
      ++stream_kernels[a.stream];
      kernels.push_back({a.start_ns, a.end_ns()});
      durations.push_back(a.dur_ns);
      const HostCall* l = launch_for(a);
      if (l == nullptr) {
        ++unmatched_kernels;
        continue;
      }
      ++g.kernels_with_launch;
      if (a.dur_ns < l->dur_ns) ++g.kernels_shorter_than_launch;
      delays.push_back(a.start_ns - l->end_ns());
      queue_events[a.stream].push_back({l->start_ns, +1});
      queue_events[a.stream].push_back({a.end_ns(), -1});
    }
    g.short_kernel_operators = top_launchers(short_by_operator);
    g.busy_ns = UnionLength(kernels);
    int64_t all_ns = UnionLength(all);
    g.copy_only_ns = all_ns - g.busy_ns;
    g.idle_ns = window - all_ns;
    g.busy_ratio = window > 0 ? static_cast<double>(g.busy_ns) / window : 0;
    g.launch_rate_per_s = window_s > 0 ? g.kernels / window_s : 0;

    // Idle gaps, classified by the GPU work that ends them (HTA's rules, over all streams).
    int64_t cur_end = ws;
    for (uint32_t i : idx) {
      const GpuActivity& a = trace.gpu[i];
      if (a.start_ns > cur_end) {
        int64_t gap = a.start_ns - cur_end;
        const HostCall* l = launch_for(a);
        if (l != nullptr && l->start_ns > cur_end) {
          g.idle.host_wait_ns += gap;
        } else if (l != nullptr && gap < options.kernel_wait_gap_ns) {
          g.idle.kernel_wait_ns += gap;
        } else {
          g.idle.other_ns += gap;
        }
      }
      cur_end = std::max(cur_end, a.end_ns());
    }
    if (we > cur_end) g.idle.host_wait_ns += we - cur_end;  // nothing more was launched

    if (!durations.empty()) {
      DurationStats s = StatsOf(durations);
      g.median_kernel_ns = s.median_ns;
    }
    std::sort(delays.begin(), delays.end());
    g.launch_delay_p50_ns = Percentile(delays, 0.50);
    g.launch_delay_p90_ns = Percentile(delays, 0.90);
    g.launch_delay_p99_ns = Percentile(delays, 0.99);
    all_delays.insert(all_delays.end(), delays.begin(), delays.end());

    // Busy share per time bin.
    g.busy_timeline.assign(bins, 0.0);
    if (window > 0) {
      double width = static_cast<double>(window) / bins;
      for (const Interval& k : Merge(kernels)) {
        double s = std::max<double>(0, k.start - ws), e = std::min<double>(window, k.end - ws);
        while (s < e) {
          int b = std::min(bins - 1, static_cast<int>(s / width));
          double bin_end = (b + 1) * width;
          double piece = std::min(e, bin_end) - s;
          g.busy_timeline[b] += piece / width;
          s += piece;
          if (piece <= 0) break;
        }
      }
      for (double& v : g.busy_timeline) v = std::min(1.0, v);
    }

    // Queue depth per stream: +1 at launch-call start, -1 at kernel end.
    for (auto& [stream, events] : queue_events) {
      std::sort(events.begin(), events.end());  // at equal times the -1 comes first
      StreamQueueRow q;
      q.pid = g.pid;
      q.device = g.device;
      q.stream = stream;
      q.kernels = stream_kernels[stream];
      int64_t depth = 0;
      double area = 0;
      int64_t last = events.front().first;
      for (const auto& [t, delta] : events) {
        area += static_cast<double>(depth) * (t - last);
        last = t;
        depth += delta;
        q.max_depth = std::max<uint32_t>(
            q.max_depth, static_cast<uint32_t>(std::clamp<int64_t>(depth, 0, UINT32_MAX)));
      }
      q.avg_depth = window > 0 ? area / window : 0;
      r.queues.push_back(q);
    }
    r.gpus.push_back(std::move(g));
  }
  std::sort(all_delays.begin(), all_delays.end());
  r.launch_delay_p50_ns = Percentile(all_delays, 0.50);
  r.launch_delay_p90_ns = Percentile(all_delays, 0.90);
  r.launch_delay_p99_ns = Percentile(all_delays, 0.99);
  {
    static constexpr int64_t kEdges[] = {0,         1000,      2000,      5000,      10'000,
                                         20'000,    50'000,    100'000,   200'000,   500'000,
                                         1'000'000, 2'000'000, 5'000'000, 10'000'000};
    constexpr size_t kN = sizeof(kEdges) / sizeof(kEdges[0]);
    for (size_t i = 0; i < kN; ++i) {
      r.launch_delay_histogram.push_back({kEdges[i], i + 1 < kN ? kEdges[i + 1] : INT64_MAX, 0});
    }
    for (int64_t d : all_delays) {
      size_t b = 0;
      while (b + 1 < kN && d >= kEdges[b + 1]) ++b;
      ++r.launch_delay_histogram[b].count;
    }
  }
  if (unmatched_kernels > 0) {
    r.notes.push_back(absl::StrCat(
        unmatched_kernels,
        " kernels have no launch call with their correlation id (a trace "
        "without CUDA API events, or kernels replayed from CUDA graphs): launch delay, queue "
        "depth and the host-wait/kernel-wait split cover the matched kernels only."));
  }

  // Kernel summary (cuda_gpu_kern_sum) with occupancy.
  absl::flat_hash_map<uint32_t, KernelAcc> kernel_acc;
  struct Occupancy {
    bool known = false;
    bool impossible = false;  // no GPU could run the configuration: counted, not estimated
    OccupancyEstimate estimate;
  };
  std::map<std::pair<uint32_t, int32_t>, Occupancy> occ_cache;
  std::string impossible_example;
  for (uint32_t i = 0; i < trace.gpu.size(); ++i) {
    const GpuActivity& a = trace.gpu[i];
    if (a.type != GpuActivity::Type::kKernel) continue;
    KernelAcc& acc = kernel_acc[a.name];
    acc.durations.push_back(a.dur_ns);
    if (launcher_of(i) != OperatorAnalysis::kNoOperator) {
      OperatorLaunches& l = acc.launchers[launcher_of(i)];
      ++l.kernels;
      l.total_ns = SaturatingAdd(l.total_ns, a.dur_ns);
    }
    ++r.kernel_count;
    r.kernel_time_ns = SaturatingAdd(r.kernel_time_ns, a.dur_ns);
    if (a.launch_config == 0) continue;
    ++acc.configs[a.launch_config];
    auto key = std::make_pair(a.launch_config, a.device);
    auto it = occ_cache.find(key);
    if (it == occ_cache.end()) {
      Occupancy o;
      const LaunchConfig& config = trace.launch_configs[a.launch_config];
      o.known = EstimateOccupancy(config, props[a.device], &o.estimate);
      if (!o.known) {
        std::string problem = LaunchConfigProblem(config, props[a.device]);
        o.impossible = !problem.empty();
        if (o.impossible && impossible_example.empty()) {
          impossible_example =
              absl::StrCat("e.g. ", trace.names.Name(a.name).substr(0, 80), ": ", problem);
        }
      }
      it = occ_cache.emplace(key, o).first;
    }
    if (it->second.impossible) ++r.impossible_launches;
    if (it->second.known) {
      acc.occupancy_time += it->second.estimate.achieved_estimate * a.dur_ns;
      acc.theoretical_time += it->second.estimate.theoretical * a.dur_ns;
      acc.known_time += a.dur_ns;
    }
  }
  if (r.impossible_launches > 0) {
    r.notes.push_back(absl::StrCat(
        r.impossible_launches, " kernel launches have a launch configuration no GPU can run (",
        impossible_example,
        "): no occupancy is estimated for them. The trace is corrupt or was edited."));
  }
  r.distinct_kernels = kernel_acc.size();
  std::vector<KernelRow> kernel_rows;
  for (auto& [name, acc] : kernel_acc) {
    KernelRow k;
    k.name = trace.names.Name(name);
    k.stats = StatsOf(acc.durations);
    k.operators = top_launchers(acc.launchers);
    k.time_ratio =
        r.kernel_time_ns > 0 ? static_cast<double>(k.stats.total_ns) / r.kernel_time_ns : 0;
    if (acc.known_time > 0) {
      k.est_occupancy = acc.occupancy_time / acc.known_time;
      k.theoretical_occupancy = acc.theoretical_time / acc.known_time;
    }
    if (!acc.configs.empty()) {
      auto top = std::max_element(
          acc.configs.begin(), acc.configs.end(), [](const auto& a, const auto& b) {
            return a.second < b.second || (a.second == b.second && a.first > b.first);
          });
      const LaunchConfig& c = trace.launch_configs[top->first];
      k.launch_config = ConfigText(c);
      for (const auto& [key, value] : occ_cache) {
        if (key.first == top->first && value.known) {
          k.occupancy_limiter = value.estimate.limiter;
          break;
        }
      }
    }
    kernel_rows.push_back(std::move(k));
  }
  std::sort(kernel_rows.begin(), kernel_rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.stats.total_ns > b.stats.total_ns ||
           (a.stats.total_ns == b.stats.total_ns && a.name < b.name);
  });

  // CUDA API summary (cuda_api_sum), copies, synchronization, processes.
  absl::flat_hash_map<uint32_t, std::vector<int64_t>> api_durations;
  std::map<int32_t, ProcessRow> processes;
  std::map<std::pair<std::string, std::string>, SyncRow> syncs;
  std::map<std::pair<int32_t, int32_t>, std::vector<Interval>> api_sync_by_thread,
      activity_sync_by_thread;
  // Copies to or from pageable memory block the calling thread whatever the API says.
  absl::flat_hash_map<const HostCall*, bool> pageable_copy_call;
  for (const GpuActivity& a : trace.gpu) {
    if (a.type != GpuActivity::Type::kMemcpy) continue;
    if (a.src_kind != MemoryKind::kPageable && a.dst_kind != MemoryKind::kPageable) continue;
    if (const HostCall* l = launch_for(a)) pageable_copy_call[l] = true;
  }
  for (const HostCall& c : trace.host) {
    const std::string& name = trace.names.Name(c.name);
    if (c.type == HostCall::Type::kSync) {
      SyncRow& s = syncs[{name, "activity"}];
      s.kind = name;
      s.source = "activity";
      ++s.count;
      s.total_ns = SaturatingAdd(s.total_ns, c.dur_ns);
      s.max_ns = std::max(s.max_ns, c.dur_ns);
      if (name != "Stream Wait Event") {
        activity_sync_by_thread[{c.pid, c.tid}].push_back({c.start_ns, c.end_ns()});
      }
      continue;
    }
    api_durations[c.name].push_back(c.dur_ns);
    r.api_time_ns = SaturatingAdd(r.api_time_ns, c.dur_ns);
    ProcessRow& p = processes[c.pid];
    p.pid = c.pid;
    ++p.api_calls;
    p.api_ns = SaturatingAdd(p.api_ns, c.dur_ns);
    const bool blocking = IsBlockingApi(name);
    if (blocking || pageable_copy_call.contains(&c)) {
      std::string kind(StripVersion(name));
      if (!blocking) kind += " (pageable copy)";
      SyncRow& s = syncs[{kind, "api"}];
      s.kind = kind;
      s.source = "api";
      ++s.count;
      s.total_ns = SaturatingAdd(s.total_ns, c.dur_ns);
      s.max_ns = std::max(s.max_ns, c.dur_ns);
      api_sync_by_thread[{c.pid, c.tid}].push_back({c.start_ns, c.end_ns()});
    }
  }
  // Host time blocked: the union per thread (runtime calls nest driver calls), from API calls
  // when the trace has them, else from CUPTI synchronization records.
  auto& sync_source = api_sync_by_thread.empty() ? activity_sync_by_thread : api_sync_by_thread;
  for (auto& [thread, intervals] : sync_source) {
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval& a, const Interval& b) { return a.start < b.start; });
    ProcessRow& p = processes[thread.first];
    p.pid = thread.first;
    p.sync_ns = SaturatingAdd(p.sync_ns, UnionLength(intervals));
  }
  for (const GpuRow& g : r.gpus) {
    ProcessRow& p = processes[g.pid];
    p.pid = g.pid;
    p.kernels += g.kernels;
    p.devices.push_back(g.device);
  }
  for (auto& [pid, p] : processes) {
    p.launch_rate_per_s = window_s > 0 ? p.kernels / window_s : 0;
    r.processes.push_back(p);
  }
  for (auto& [name, durations] : api_durations) {
    ApiRow a;
    a.name = trace.names.Name(name);
    a.stats = StatsOf(durations);
    a.time_ratio = r.api_time_ns > 0 ? static_cast<double>(a.stats.total_ns) / r.api_time_ns : 0;
    r.apis.push_back(std::move(a));
  }
  std::sort(r.apis.begin(), r.apis.end(), [](const ApiRow& a, const ApiRow& b) {
    return a.stats.total_ns > b.stats.total_ns ||
           (a.stats.total_ns == b.stats.total_ns && a.name < b.name);
  });
  if (r.apis.size() > static_cast<size_t>(std::max(0, options.top_apis))) {
    r.apis.resize(std::max(0, options.top_apis));
  }
  for (auto& [key, s] : syncs) r.syncs.push_back(s);
  std::sort(r.syncs.begin(), r.syncs.end(),
            [](const SyncRow& a, const SyncRow& b) { return a.total_ns > b.total_ns; });

  std::map<std::pair<std::string, std::string>, CopyRow> copies;
  for (const GpuActivity& a : trace.gpu) {
    if (a.type == GpuActivity::Type::kKernel) continue;
    std::pair<std::string, std::string> key =
        a.type == GpuActivity::Type::kMemset
            ? std::make_pair(std::string("Memset"), std::string("Device"))
            : std::make_pair(std::string(CopyKindName(a.copy_kind)),
                             std::string(HostSideMemory(a)));
    CopyRow& c = copies[key];
    c.kind = key.first;
    c.memory = key.second;
    ++c.count;
    c.bytes = SaturatingAdd(c.bytes, a.bytes);
    c.total_ns = SaturatingAdd(c.total_ns, a.dur_ns);
  }
  for (auto& [key, c] : copies) {
    c.bandwidth_gbps = c.total_ns > 0 ? static_cast<double>(c.bytes) / c.total_ns : 0;
    r.copies.push_back(c);
  }
  std::sort(r.copies.begin(), r.copies.end(),
            [](const CopyRow& a, const CopyRow& b) { return a.total_ns > b.total_ns; });

  r.findings = BuildFindings(r, kernel_rows, options);
  if (kernel_rows.size() > static_cast<size_t>(std::max(0, options.top_kernels))) {
    kernel_rows.resize(std::max(0, options.top_kernels));
  }
  r.top_kernels = std::move(kernel_rows);
  r.operator_summary = operators.summary;
  r.operators = std::move(operators.rows);
  if (r.operators.size() > static_cast<size_t>(std::max(0, options.top_operators))) {
    r.operators.resize(std::max(0, options.top_operators));
  }
  return r;
}

absl::StatusOr<Report> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                         const AnalysisOptions& options) {
  absl::StatusOr<Trace> trace = ReadTraceFiles(paths);
  if (!trace.ok()) return trace.status();
  return Analyze(*trace, options);
}

}  // namespace profd::analysis
