// The bottleneck report: what the analysis computes from one trace (or the traces of one
// capture), as plain data. Renderers turn it into a terminal report, JSON (the capture's
// summary.json and `profctl report --json`) and HTML. Times are ns, ratios are 0..1.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/gpu_counters.h"

namespace profd::analysis {

// Thresholds of the findings and sizes of the tables. The defaults are documented in
// docs/ANALYSIS.md and printed with each finding, so a user can see why it fired.
struct AnalysisOptions {
  // GPU mostly idle: kernel busy time below this share of the window.
  double idle_busy_below = 0.50;
  // Launch-bound: at least this many kernels on the GPU, busy below launch_bound_busy_below, and
  // either this share of kernels shorter than their own launch call or a median kernel shorter
  // than launch_bound_median_kernel_ns.
  uint64_t launch_bound_min_kernels = 100;
  double launch_bound_busy_below = 0.80;
  double launch_bound_short_fraction = 0.50;
  int64_t launch_bound_median_kernel_ns = 10'000;
  // HTA's consecutive_kernel_delay: an idle gap shorter than this after a kernel that was
  // already queued is launch overhead ("kernel wait").
  int64_t kernel_wait_gap_ns = 30'000;
  // Copies in the hot path: host<->device copy time on the GPU at least this share of window.
  double copies_hot_path_fraction = 0.05;
  // Pageable memory: at least this many pageable copies, or this many bytes through them.
  uint64_t pageable_min_copies = 10;
  uint64_t pageable_min_bytes = 1 << 20;
  // Synchronizations stalling the host: host time blocked in sync calls, share of window.
  double sync_stall_fraction = 0.10;
  // A few kernels dominating: the top N by total time hold at least this share of kernel time
  // (only when there are more than N distinct kernels).
  int dominant_top_n = 3;
  double dominant_fraction = 0.50;
  // Low occupancy: kernels estimated below this achieved occupancy that together take at least
  // low_occupancy_time_fraction of kernel time.
  double low_occupancy_below = 0.25;
  double low_occupancy_time_fraction = 0.10;

  // Bound (kernels with hardware counters, docs/ANALYSIS.md), the first that holds:
  // compute-bound when the tensor pipes are busy at least bound_compute_tensor (a GEMM near DRAM
  // peak is still a GEMM); memory-bound when DRAM throughput over its running time is at least
  // bound_memory_dram of peak; compute-bound when the SMs are active at least bound_compute_sm;
  // launch-bound when its median instance is shorter than bound_launch_kernel_ns; else
  // latency-bound (SMs held, neither pipes nor memory busy: stalls, low occupancy, few blocks).
  double bound_memory_dram = 0.60;
  double bound_compute_tensor = 0.40;
  double bound_compute_sm = 0.80;
  int64_t bound_launch_kernel_ns = 10'000;

  int top_kernels = 20;
  int top_apis = 20;
  // Rows of the operator table, and kernels listed under each of them.
  int top_operators = 20;
  int operator_kernels = 5;
  int timeline_bins = 120;
};

// nsys stats columns: Total, Instances, Avg, Med, Min, Max, StdDev (sample, n-1).
struct DurationStats {
  uint64_t count = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
  double avg_ns = 0;
  double median_ns = 0;
  double stddev_ns = 0;
};

// Kernels counted by the CPU operator that launched them (the innermost one, by External id).
struct OperatorLaunches {
  std::string name;  // aten::addmm
  uint64_t kernels = 0;
  int64_t total_ns = 0;
};

struct IdleBreakdown {
  int64_t host_wait_ns = 0;    // the next GPU work was not yet launched when the GPU went idle
  int64_t kernel_wait_ns = 0;  // already launched, gap below kernel_wait_gap_ns
  int64_t other_ns = 0;        // already launched, longer gap (stream/event waits, unknown)
};

// One GPU as used by one process.
struct GpuRow {
  int32_t pid = 0;
  int32_t device = 0;
  std::string device_name;
  int64_t busy_ns = 0;       // union of kernel intervals within the window
  double busy_ratio = 0;     // busy_ns / window
  int64_t copy_only_ns = 0;  // memcpy/memset while no kernel ran
  int64_t idle_ns = 0;       // nothing ran: window - union of all GPU activity
  IdleBreakdown idle;
  uint64_t kernels = 0;
  uint64_t memcpys = 0;
  uint64_t memsets = 0;
  uint64_t memcpy_bytes = 0;
  double launch_rate_per_s = 0;  // kernels per second of window
  double median_kernel_ns = 0;
  uint64_t kernels_with_launch = 0;          // matched to their launch call by correlation
  uint64_t kernels_shorter_than_launch = 0;  // ran shorter than their launch call took
  // Kernel start - launch call end, nearest-rank percentiles over matched kernels.
  int64_t launch_delay_p50_ns = 0;
  int64_t launch_delay_p90_ns = 0;
  int64_t launch_delay_p99_ns = 0;
  std::vector<double> busy_timeline;  // kernel busy share per bin of window / timeline_bins
  // Kernels shorter than launch_bound_median_kernel_ns by the operator that launched them, most
  // first (top 3); empty when the trace has no CPU operators.
  std::vector<OperatorLaunches> short_kernel_operators;
};

struct ProcessRow {
  int32_t pid = 0;
  uint64_t api_calls = 0;
  int64_t api_ns = 0;
  uint64_t kernels = 0;
  double launch_rate_per_s = 0;
  int64_t sync_ns = 0;  // host time blocked in synchronizing calls
  std::vector<int32_t> devices;
};

struct KernelRow {
  std::string name;
  DurationStats stats;
  double time_ratio = 0;      // of all kernel time
  double est_occupancy = -1;  // time-weighted estimated achieved occupancy; -1 unknown
  double theoretical_occupancy = -1;
  std::string occupancy_limiter;  // of its most used launch configuration
  std::string launch_config;      // "grid [x,y,z] block [x,y,z] regs R smem S"
  // The operators that launched its instances, most first (top 3); empty without CPU operators.
  std::vector<OperatorLaunches> operators;
  // Hardware counters over its running time (a capture with --gpu-metrics): each counter's mean
  // over the PM samples overlapping its instances, weighted by the overlap; NaN where not
  // measured. counter_time_ns: the instances' time the samples covered (0: no counters).
  std::array<double, kGpuCounters> counters = NoCounters();
  int64_t counter_time_ns = 0;
  // What bounds it, from those counters (docs/ANALYSIS.md, "Bound"): "compute", "memory",
  // "latency", "launch"; empty when not measured. bound_reason: the numbers behind it.
  std::string bound;
  std::string bound_reason;

  static std::array<double, kGpuCounters> NoCounters();
};

// A GPU activity under an operator row: what makes up the row's CUDA total.
struct OperatorKernel {
  std::string name;
  uint64_t count = 0;  // instances, once per enclosing call of the operator
  int64_t total_ns = 0;
};

// One row of torch.profiler's key_averages(): every call of one operator name (cpu_op), or of one
// record_function label (user_annotation), with torch's definitions (docs/ANALYSIS.md).
struct OperatorRow {
  std::string name;
  bool user_annotation = false;
  uint64_t calls = 0;
  int64_t self_cpu_ns = 0;    // own duration - direct CPU children's (operators, CUDA API calls)
  int64_t cpu_total_ns = 0;   // own duration
  int64_t self_cuda_ns = 0;   // GPU activities launched by the operator itself
  int64_t cuda_total_ns = 0;  // self + operators inside it
  uint64_t device_events_self = 0;
  uint64_t device_events = 0;           // kernels, copies, memsets in cuda_total
  double kernels_per_call = 0;          // device_events / calls
  double cuda_per_call_ns = 0;          // cuda_total / calls
  double cpu_per_call_ns = 0;           // cpu_total / calls
  std::vector<OperatorKernel> kernels;  // most time first, at most operator_kernels
  uint64_t distinct_kernels = 0;        // under this row, before the cut
};

struct OperatorSummary {
  uint64_t instances = 0;  // operator and user annotation events in the tables
  uint64_t distinct = 0;   // rows before the top_operators cut
  // torch's "Self CPU time total": self time of every CPU event, CUDA API calls included.
  int64_t self_cpu_total_ns = 0;
  // torch's "Self CUDA time total": every GPU activity's time.
  int64_t self_cuda_total_ns = 0;
  uint64_t device_events = 0;
  uint64_t device_events_attributed = 0;  // launched by some operator
  uint64_t attributed_by_launch_call =
      0;  // of those: no External id, found through the launch call
};

struct ApiRow {
  std::string name;
  DurationStats stats;
  double time_ratio = 0;  // of all API time
};

struct CopyRow {
  std::string kind;    // HtoD, DtoH, DtoD, HtoH, PtoP, Memset
  std::string memory;  // host side: Pageable, Pinned (Device for DtoD and memsets)
  uint64_t count = 0;
  uint64_t bytes = 0;
  int64_t total_ns = 0;
  double bandwidth_gbps = 0;  // bytes / total time (GB/s = bytes per ns)
};

struct SyncRow {
  std::string kind;    // API name (cudaStreamSynchronize) or CUPTI record kind (Stream Sync)
  std::string source;  // "api" (host call) or "activity" (CUPTI synchronization record)
  uint64_t count = 0;
  int64_t total_ns = 0;
  int64_t max_ns = 0;
};

// Kernels launched but not finished on a stream, from launch-call start to kernel end.
struct StreamQueueRow {
  int32_t pid = 0;
  int32_t device = 0;
  int32_t stream = 0;
  uint64_t kernels = 0;
  uint32_t max_depth = 0;
  double avg_depth = 0;  // time-weighted over the window
};

struct HistogramBin {
  int64_t lo_ns = 0;
  int64_t hi_ns = 0;  // INT64_MAX for the last bin
  uint64_t count = 0;
};

struct Finding {
  std::string id;        // gpu_idle, launch_bound, copies_hot_path, pageable_memory,
                         // sync_stall, dominant_kernels, low_occupancy, kernel_bound
  std::string severity;  // critical, warning, info
  std::string title;
  std::string threshold;  // the rule that fired, with its numbers
  std::vector<std::string> evidence;
  std::vector<std::string> advice;
  double value = 0;  // the measured quantity compared with the threshold
};

struct InputSummary {
  std::string path;
  std::string format;
  bool gzip = false;
  uint64_t bytes = 0;
  uint64_t events = 0;
};

struct DeviceSummary {
  int32_t id = 0;
  std::string name;
  uint32_t num_sms = 0;
  bool assumed = false;  // not in the trace: H100/H200-like defaults used
};

struct Report {
  std::vector<InputSummary> inputs;
  int64_t window_start_ns = 0;
  int64_t window_ns = 0;
  uint64_t events = 0;
  uint64_t invalid_events = 0;       // skipped: impossible times, sizes or ids (see notes)
  uint64_t impossible_launches = 0;  // kernels whose launch configuration no GPU can run
  uint64_t kernel_count = 0;
  int64_t kernel_time_ns = 0;
  uint64_t distinct_kernels = 0;
  int64_t api_time_ns = 0;
  // Events counted in the one row past the analysis's caps on distinct names (NameTable::Limits,
  // StreamLimits::max_kernel_names and max_api_names), named NameTable::kOtherName, and at least
  // how many distinct names went there (a note says so too). 0: every name has its own row.
  uint64_t folded_kernels = 0;
  uint64_t folded_api_calls = 0;
  uint64_t folded_names = 0;
  std::vector<DeviceSummary> devices;
  std::vector<GpuRow> gpus;
  std::vector<ProcessRow> processes;
  std::vector<KernelRow> top_kernels;
  std::vector<ApiRow> apis;
  std::vector<CopyRow> copies;
  std::vector<SyncRow> syncs;
  std::vector<StreamQueueRow> queues;
  std::vector<OperatorRow> operators;  // by CUDA total; empty when the trace has no cpu_op
  OperatorSummary operator_summary;
  std::vector<HistogramBin> launch_delay_histogram;
  int64_t launch_delay_p50_ns = 0;
  int64_t launch_delay_p90_ns = 0;
  int64_t launch_delay_p99_ns = 0;
  // Hardware counter samples the report used (--gpu-metrics), and their mean length.
  uint64_t counter_samples = 0;
  int64_t counter_interval_ns = 0;
  std::vector<Finding> findings;
  std::vector<std::string> notes;  // caveats: assumed device properties, unmatched launches
  AnalysisOptions options;
};

}  // namespace profd::analysis
