// StreamingAnalysis: the report's numbers (definitions in docs/ANALYSIS.md), one event at a time.
// Findings are derived from them in findings.cc, the operator table in operator_table.cc.
#include "analysis/streaming_analysis.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/findings.h"
#include "analysis/occupancy.h"
#include "common/checked_math.h"

namespace profd::analysis {
namespace {

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

// Union length of intervals that arrive in start order: one open segment. An interval starting
// before the open segment (a late event) is added as far as it precedes it, which counts twice
// any part of it that an earlier segment already covered.
struct RunningUnion {
  int64_t start = 0;
  int64_t end = INT64_MIN;  // INT64_MIN: nothing yet
  int64_t closed = 0;       // length of the segments before the open one

  // Adds [s, e]; returns true and the segment it closed when it opened a new one.
  bool Add(int64_t s, int64_t e, int64_t* closed_start, int64_t* closed_end) {
    if (end == INT64_MIN) {
      start = s;
      end = e;
      return false;
    }
    if (s > end) {
      *closed_start = start;
      *closed_end = end;
      closed += end - start;
      start = s;
      end = e;
      return true;
    }
    if (s < start) closed += std::min(e, start) - s;
    end = std::max(end, e);
    return false;
  }
  int64_t Length() const { return end == INT64_MIN ? closed : closed + (end - start); }
};

// Union length of intervals arriving in any order within a horizon: disjoint segments, those
// ending before Retire's bound folded into a total.
class IntervalSet {
 public:
  void Insert(int64_t s, int64_t e) {
    if (e <= retired_before_) {
      late_ += e - s;  // wholly in the retired past: its overlap cannot be known any more
      return;
    }
    s = std::max(s, retired_before_);
    auto it = segments_.upper_bound(s);
    if (it != segments_.begin() && std::prev(it)->second >= s) --it;
    while (it != segments_.end() && it->first <= e) {
      s = std::min(s, it->first);
      e = std::max(e, it->second);
      it = segments_.erase(it);
    }
    segments_.emplace(s, e);
  }
  // Folds the segments that end before `bound`, and the oldest beyond max_segments, into the
  // total: later intervals cannot overlap them (or, past the cap, are counted whole).
  void Retire(int64_t bound, size_t max_segments) {
    while (!segments_.empty() &&
           (segments_.begin()->second < bound || segments_.size() > max_segments)) {
      total_ += segments_.begin()->second - segments_.begin()->first;
      retired_before_ = std::max(retired_before_, segments_.begin()->second);
      segments_.erase(segments_.begin());
    }
  }
  int64_t Length() const {
    int64_t n = total_ + late_;
    for (const auto& [s, e] : segments_) n += e - s;
    return n;
  }

 private:
  std::map<int64_t, int64_t> segments_;
  int64_t total_ = 0;
  int64_t late_ = 0;
  int64_t retired_before_ = INT64_MIN;
};

// Kernel busy time in fixed-width time slots from the first kernel on, the width doubling (and
// neighbours merging) whenever the slots would pass kSlots: the busy timeline's resolution is
// 1/kSlots of the GPU's active span, whatever its length.
class BusySlots {
 public:
  static constexpr size_t kSlots = 8192;

  void Add(int64_t s, int64_t e) {
    if (e <= s) return;
    if (slots_.empty()) origin_ = s;
    s = std::max(s, origin_);  // a late segment before the first: clamped
    if (e <= s) return;
    while (static_cast<uint64_t>(e - origin_) > static_cast<uint64_t>(width_) * kSlots) Coarsen();
    const size_t last = static_cast<size_t>((e - 1 - origin_) / width_);
    if (slots_.size() <= last) slots_.resize(last + 1, 0.0);
    for (size_t i = static_cast<size_t>((s - origin_) / width_); i <= last; ++i) {
      const int64_t lo = origin_ + static_cast<int64_t>(i) * width_;
      slots_[i] += static_cast<double>(std::min(e, lo + width_) - std::max(s, lo));
    }
  }

  // Busy share per bin of [ws, ws + window), each slot spread evenly over its width.
  std::vector<double> Bins(int64_t ws, int64_t window, int bins) const {
    std::vector<double> out(bins, 0.0);
    if (window <= 0) return out;
    const double bin_width = static_cast<double>(window) / bins;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i] <= 0) continue;
      double s = static_cast<double>(origin_ - ws) + static_cast<double>(i) * width_;
      const double e = std::min<double>(s + width_, window);
      const double density = slots_[i] / width_;
      s = std::max(0.0, s);
      while (s < e) {
        const int b = std::min(bins - 1, static_cast<int>(s / bin_width));
        const double piece = std::min(e, (b + 1) * bin_width) - s;
        if (piece <= 0) break;
        out[b] += density * piece / bin_width;
        s += piece;
      }
    }
    for (double& v : out) v = std::min(1.0, v);
    return out;
  }

 private:
  void Coarsen() {
    std::vector<double> merged((slots_.size() + 1) / 2, 0.0);
    for (size_t i = 0; i < slots_.size(); ++i) merged[i / 2] += slots_[i];
    slots_ = std::move(merged);
    width_ *= 2;
  }

  int64_t origin_ = 0;
  int64_t width_ = 1;
  std::vector<double> slots_;
};

// A CUDA API call remembered by correlation id, for the GPU work it launched.
struct Launch {
  int64_t start = 0;
  int64_t end = 0;
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t name = 0;
  HostCall::Type type = HostCall::Type::kRuntime;
  bool pageable_counted = false;  // already counted as a pageable-copy synchronization
};

// One GPU as used by one process, as its activities go by in start order.
struct GpuState {
  uint64_t kernels = 0;
  uint64_t memcpys = 0;
  uint64_t memsets = 0;
  uint64_t memcpy_bytes = 0;
  uint64_t kernels_with_launch = 0;
  uint64_t kernels_shorter_than_launch = 0;
  RunningUnion busy;  // kernels
  RunningUnion all;   // kernels, copies, memsets
  // The first activity: the gap before it is classified once the window is known.
  int64_t first_start = 0;
  bool first_launched = false;
  int64_t first_launch_start = 0;
  IdleBreakdown idle;  // the gaps between activities
  Samples durations;
  Samples delays;
  BusySlots slots;
  absl::flat_hash_map<uint32_t, OperatorLaunches> short_by_operator;
};

struct StreamState {
  uint64_t kernels = 0;
  bool matched = false;
  double area = 0;  // integral of the queue depth: sum of (kernel end - launch start)
  uint32_t max_depth = 0;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> in_flight;  // kernel ends
};

struct KernelState {
  Samples durations;
  // Hardware counters over its instances' running time: sums of value x overlap, and the overlap
  // each counter was measured for (CounterCoverage).
  std::array<double, kGpuCounters> counter_sums{};
  std::array<double, kGpuCounters> counter_weights{};
  int64_t counter_time = 0;
  absl::flat_hash_map<uint32_t, OperatorLaunches> launchers;  // by operator row
  // Instances and time per (launch configuration, device): the occupancy estimate needs the
  // device's properties, which may arrive after the kernels.
  std::map<std::pair<uint32_t, int32_t>, std::pair<uint64_t, int64_t>> configs;
};

struct PendingGpu {
  GpuActivity a;
  uint32_t launcher;
  uint64_t seq;
  bool operator>(const PendingGpu& o) const {
    return std::tie(a.start_ns, seq) > std::tie(o.a.start_ns, o.seq);
  }
};

constexpr int64_t kDelayEdges[] = {0,         1000,      2000,      5000,      10'000,
                                   20'000,    50'000,    100'000,   200'000,   500'000,
                                   1'000'000, 2'000'000, 5'000'000, 10'000'000};
constexpr size_t kDelayBins = sizeof(kDelayEdges) / sizeof(kDelayEdges[0]);
constexpr size_t kMaxSyncSegmentsPerThread = 4096;
// The row of the names past StreamLimits::max_kernel_names / max_api_names (and of the names the
// NameTable itself folded): shown as NameTable::kOtherName.
constexpr uint32_t kFoldedRow = UINT32_MAX;
// Counter samples kept per GPU ahead of the kernels analysed: 10 s at 100 us.
constexpr size_t kMaxCounterSamplesAhead = 100'000;

// The span a report's rates and idle times cover: from the first start to the last end of any
// event in the trace (docs/ANALYSIS.md).
struct ReportWindow {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t ns = 0;
  double seconds = 0;
};

// The three operators that launched the most of some kernels, by their rows in operators.
std::vector<OperatorLaunches> TopLaunchers(
    const absl::flat_hash_map<uint32_t, OperatorLaunches>& by_row,
    const OperatorAnalysis& operators) {
  std::vector<OperatorLaunches> out;
  for (const auto& [row, l] : by_row) {
    if (row >= operators.rows.size()) continue;
    out.push_back(l);
    out.back().name = operators.rows[row].name;
  }
  std::sort(out.begin(), out.end(), [](const OperatorLaunches& a, const OperatorLaunches& b) {
    return std::tie(b.kernels, b.total_ns, a.name) < std::tie(a.kernels, a.total_ns, b.name);
  });
  if (out.size() > 3) out.resize(3);
  return out;
}

}  // namespace

StreamLimits StreamLimits::Unbounded() {
  StreamLimits l;
  l.reorder_window_ns = 0;  // the caller adds in start order
  l.max_buffered_events = SIZE_MAX;
  l.launch_memory_ns = INT64_MAX;
  l.max_launch_calls = SIZE_MAX;
  l.exact_samples = UINT64_MAX;
  l.max_cpu_ops = SIZE_MAX;
  return l;
}

struct StreamingAnalysis::State {
  State(const Trace* t, const AnalysisOptions& o, const StreamLimits& l)
      : tables(t), options(o), limits(l), budget(l.exact_samples) {}

  const Trace* tables;
  const AnalysisOptions options;
  const StreamLimits limits;
  SampleBudget budget;

  uint64_t invalid = 0;
  uint64_t late = 0;
  uint64_t unmatched_kernels = 0;

  // Launch calls by correlation id (the runtime call when both layers were recorded), and the
  // order they came in, to forget them.
  absl::flat_hash_map<int64_t, Launch> launches;
  std::deque<std::pair<int64_t, int64_t>> launch_order;  // (start, correlation)
  std::vector<int8_t> blocking_name;                     // by name id: -1 unknown, 0, 1

  // GPU activities waiting to be analysed in start order.
  std::priority_queue<PendingGpu, std::vector<PendingGpu>, std::greater<>> pending;
  uint64_t seq = 0;
  int64_t newest_start = INT64_MIN;
  int64_t frontier = INT64_MIN;  // start of the last GPU activity analysed

  std::map<std::pair<int32_t, int32_t>, GpuState> gpus;                  // (pid, device)
  std::map<std::tuple<int32_t, int32_t, int32_t>, StreamState> streams;  // (pid, device, stream)
  absl::flat_hash_set<int32_t> devices_used;
  absl::flat_hash_map<uint32_t, KernelState> kernels;
  std::vector<uint32_t> kernel_order;  // names in the order first seen
  uint64_t kernel_count = 0;
  int64_t kernel_time = 0;
  Samples all_delays;
  uint64_t delay_bins[kDelayBins] = {};
  std::map<std::pair<std::string, std::string>, CopyRow> copies;

  absl::flat_hash_map<uint32_t, Samples> api_durations;
  // Events counted in kFoldedRow, and which names went there (by id: the NameTable bounds them).
  uint64_t folded_kernels = 0;
  uint64_t folded_api_calls = 0;
  std::vector<bool> folded_ids;

  // The row a kernel or API name is counted in: its own while rows stay under max_rows.
  template <typename Rows>
  uint32_t RowOf(const Rows& rows, uint32_t name, size_t max_rows, uint64_t* folded) {
    if (!tables->names.IsOther(name) && (rows.contains(name) || rows.size() < max_rows)) {
      return name;
    }
    ++*folded;
    if (!tables->names.IsOther(name)) {
      if (folded_ids.size() <= name) folded_ids.resize(tables->names.size(), false);
      folded_ids[name] = true;
    }
    return kFoldedRow;
  }
  int64_t api_time = 0;
  std::map<int32_t, ProcessRow> processes;
  std::map<std::pair<std::string, std::string>, SyncRow> syncs;
  // Host time blocked per thread: from API calls when the trace has them, else from CUPTI's
  // synchronization records.
  std::map<std::pair<int32_t, int32_t>, IntervalSet> api_sync, activity_sync;

  std::vector<CpuOp> ops;
  uint64_t ops_dropped = 0;

  // Hardware counter samples per (file, device), in time order: those still ahead of the
  // frontier, which the kernels analysed next may overlap.
  std::map<std::pair<uint16_t, int32_t>, std::deque<CounterSample>> counter_tracks;
  uint64_t counter_samples = 0;
  int64_t counter_time = 0;  // of all samples, for their mean length

  void AddCounters(const CounterSample& c) {
    ++counter_samples;
    counter_time = SaturatingAdd(counter_time, c.dur_ns);
    std::deque<CounterSample>& track = counter_tracks[{c.file, c.device}];
    track.push_back(c);
    // A GPU no kernel is analysed on (a process that sees every GPU but uses one) would keep its
    // samples to the end: it keeps those past the frontier, and at most a window's worth.
    while (!track.empty() && (track.front().end_ns() <= frontier ||
                              (Forgets() && track.size() > kMaxCounterSamplesAhead))) {
      track.pop_front();
    }
  }

  // The kernel's overlap with each sample of its GPU, into its name's counter sums. Kernels come
  // in start order: samples that ended before this one started are passed for good.
  void AttributeCounters(const GpuActivity& a, KernelState& k) {
    auto it = counter_tracks.find({a.file, a.device});
    if (it == counter_tracks.end()) return;
    std::deque<CounterSample>& track = it->second;
    while (!track.empty() && track.front().end_ns() <= a.start_ns) track.pop_front();
    for (const CounterSample& c : track) {
      if (c.start_ns >= a.end_ns()) break;
      const int64_t overlap = std::min(c.end_ns(), a.end_ns()) - std::max(c.start_ns, a.start_ns);
      if (overlap <= 0) continue;
      k.counter_time = SaturatingAdd(k.counter_time, overlap);
      for (size_t i = 0; i < kGpuCounters; ++i) {
        if (std::isnan(c.values[i])) continue;
        k.counter_sums[i] += static_cast<double>(c.values[i]) * static_cast<double>(overlap);
        k.counter_weights[i] += static_cast<double>(overlap);
      }
    }
  }

  bool Blocking(uint32_t name) {
    if (name >= blocking_name.size()) blocking_name.resize(tables->names.size(), -1);
    int8_t& b = blocking_name[name];
    if (b < 0) b = IsBlockingApi(tables->names.Name(name)) ? 1 : 0;
    return b == 1;
  }

  void CountSync(const std::string& kind, const char* source, int64_t dur) {
    SyncRow& s = syncs[{kind, source}];
    s.kind = kind;
    s.source = source;
    ++s.count;
    s.total_ns = SaturatingAdd(s.total_ns, dur);
    s.max_ns = std::max(s.max_ns, dur);
  }

  void RememberLaunch(const HostCall& c) {
    if (c.correlation < 0 || c.type == HostCall::Type::kSync) return;
    const Launch l{c.start_ns, c.end_ns(), c.pid, c.tid, c.name, c.type, false};
    auto [it, inserted] = launches.try_emplace(c.correlation, l);
    if (!inserted) {
      if (c.type == HostCall::Type::kRuntime && it->second.type == HostCall::Type::kDriver) {
        const bool counted = it->second.pageable_counted;
        it->second = l;
        it->second.pageable_counted = counted;
      }
      return;
    }
    if (!Forgets()) return;
    launch_order.emplace_back(c.start_ns, c.correlation);
    if (launches.size() > limits.max_launch_calls) ForgetLaunches();
  }

  bool Forgets() const {
    return limits.launch_memory_ns != INT64_MAX || limits.max_launch_calls != SIZE_MAX;
  }
  size_t MaxSyncSegments() const { return Forgets() ? kMaxSyncSegmentsPerThread : SIZE_MAX; }

  void ForgetLaunches() {
    const int64_t bound = SaturatingSub(frontier, limits.launch_memory_ns);
    while (!launch_order.empty() &&
           (launch_order.front().first < bound || launches.size() > limits.max_launch_calls)) {
      launches.erase(launch_order.front().second);
      launch_order.pop_front();
    }
  }

  void AddHost(const HostCall& c) {
    RememberLaunch(c);
    const std::string& name = tables->names.Name(c.name);
    if (c.type == HostCall::Type::kSync) {
      CountSync(name, "activity", c.dur_ns);
      if (name != "Stream Wait Event") {
        IntervalSet& set = activity_sync[{c.pid, c.tid}];
        set.Insert(c.start_ns, c.end_ns());
        set.Retire(SyncRetireBound(), MaxSyncSegments());
      }
      return;
    }
    Samples& d =
        api_durations[RowOf(api_durations, c.name, limits.max_api_names, &folded_api_calls)];
    d.Add(c.dur_ns, &budget);
    api_time = SaturatingAdd(api_time, c.dur_ns);
    ProcessRow& p = processes[c.pid];
    p.pid = c.pid;
    ++p.api_calls;
    p.api_ns = SaturatingAdd(p.api_ns, c.dur_ns);
    if (Blocking(c.name)) {
      CountSync(std::string(StripVersion(name)), "api", c.dur_ns);
      AddApiSync(c.pid, c.tid, c.start_ns, c.end_ns());
    }
    newest_host_start = std::max(newest_host_start, c.start_ns);
  }

  void AddApiSync(int32_t pid, int32_t tid, int64_t start, int64_t end) {
    IntervalSet& set = api_sync[{pid, tid}];
    set.Insert(start, end);
    set.Retire(SyncRetireBound(), MaxSyncSegments());
  }

  // Synchronization intervals this old can no longer grow: a pageable copy adds its launch
  // call's interval when the copy is analysed, at most launch_memory_ns after the call.
  int64_t SyncRetireBound() const {
    if (limits.launch_memory_ns == INT64_MAX) return INT64_MIN;
    const int64_t newest =
        std::max(frontier, SaturatingSub(newest_host_start, limits.reorder_window_ns));
    return SaturatingSub(newest, limits.launch_memory_ns);
  }

  void AddGpu(const GpuActivity& a, uint32_t launcher) {
    newest_start = std::max(newest_start, a.start_ns);
    pending.push({a, launcher, seq++});
    const int64_t ready_before = SaturatingSub(newest_start, limits.reorder_window_ns);
    // Also when launch calls pile up: analysing the oldest GPU work first lets the calls it
    // needed be forgotten, rather than calls whose GPU work is still waiting.
    while (!pending.empty() && (pending.top().a.start_ns < ready_before ||
                                pending.size() > limits.max_buffered_events ||
                                launches.size() > limits.max_launch_calls)) {
      PendingGpu p = pending.top();
      pending.pop();
      Process(p.a, p.launcher);
    }
    if (limits.reorder_window_ns == 0) {
      // In start order already (a trace whole in memory): nothing waits.
      while (!pending.empty()) {
        PendingGpu p = pending.top();
        pending.pop();
        Process(p.a, p.launcher);
      }
    }
  }

  void Drain() {
    while (!pending.empty()) {
      PendingGpu p = pending.top();
      pending.pop();
      Process(p.a, p.launcher);
    }
  }

  int32_t PidOf(const GpuActivity& a, const Launch* l) const {
    if (l != nullptr) return l->pid;
    int32_t pid = a.file < tables->files.size() ? tables->files[a.file].host_pid : -1;
    return pid >= 0 ? pid : 0;
  }

  void Process(const GpuActivity& a, uint32_t launcher) {
    if (a.start_ns < frontier) ++late;
    frontier = std::max(frontier, a.start_ns);
    ForgetLaunches();
    Launch* l = nullptr;
    if (a.correlation >= 0) {
      auto it = launches.find(a.correlation);
      if (it != launches.end()) l = &it->second;
    }
    devices_used.insert(a.device);
    GpuState& g = gpus[{PidOf(a, l), a.device}];

    // Idle gaps, classified by the GPU work that ends them (HTA's rules, over all streams).
    if (g.all.end == INT64_MIN) {
      g.first_start = a.start_ns;
      g.first_launched = l != nullptr;
      g.first_launch_start = l ? l->start : 0;
    } else if (a.start_ns > g.all.end) {
      const int64_t gap = a.start_ns - g.all.end;
      if (l != nullptr && l->start > g.all.end) {
        g.idle.host_wait_ns += gap;
      } else if (l != nullptr && gap < options.kernel_wait_gap_ns) {
        g.idle.kernel_wait_ns += gap;
      } else {
        g.idle.other_ns += gap;
      }
    }
    int64_t cs, ce;
    g.all.Add(a.start_ns, a.end_ns(), &cs, &ce);

    if (a.type != GpuActivity::Type::kKernel) {
      ProcessCopy(a, l);
      if (a.type == GpuActivity::Type::kMemcpy) {
        ++g.memcpys;
        g.memcpy_bytes = SaturatingAdd(g.memcpy_bytes, a.bytes);
      }
      if (a.type == GpuActivity::Type::kMemset) ++g.memsets;
      return;
    }
    ++g.kernels;
    if (g.busy.Add(a.start_ns, a.end_ns(), &cs, &ce)) g.slots.Add(cs, ce);
    g.durations.Add(a.dur_ns, &budget);
    if (a.dur_ns < options.launch_bound_median_kernel_ns &&
        launcher != OperatorAnalysis::kNoOperator) {
      OperatorLaunches& o = g.short_by_operator[launcher];
      ++o.kernels;
      o.total_ns = SaturatingAdd(o.total_ns, a.dur_ns);
    }
    StreamState& q = streams[{PidOf(a, l), a.device, a.stream}];
    ++q.kernels;
    if (l == nullptr) {
      ++unmatched_kernels;
    } else {
      ++g.kernels_with_launch;
      if (a.dur_ns < l->end - l->start) ++g.kernels_shorter_than_launch;
      const int64_t delay = a.start_ns - l->end;
      g.delays.Add(delay, &budget);
      all_delays.Add(delay, &budget);
      size_t b = 0;
      while (b + 1 < kDelayBins && delay >= kDelayEdges[b + 1]) ++b;
      ++delay_bins[b];
      // Queue depth: +1 at the launch call's start, -1 at the kernel's end.
      q.matched = true;
      q.area += static_cast<double>(a.end_ns() - l->start);
      while (!q.in_flight.empty() && q.in_flight.top() <= l->start) q.in_flight.pop();
      q.in_flight.push(a.end_ns());
      q.max_depth = std::max<uint32_t>(
          q.max_depth, static_cast<uint32_t>(std::min<size_t>(q.in_flight.size(), UINT32_MAX)));
    }

    // Kernel summary (cuda_gpu_kern_sum).
    const uint32_t row = RowOf(kernels, a.name, limits.max_kernel_names, &folded_kernels);
    auto [kit, first] = kernels.try_emplace(row);
    if (first) kernel_order.push_back(row);
    KernelState& k = kit->second;
    k.durations.Add(a.dur_ns, &budget);
    AttributeCounters(a, k);
    if (launcher != OperatorAnalysis::kNoOperator) {
      OperatorLaunches& o = k.launchers[launcher];
      ++o.kernels;
      o.total_ns = SaturatingAdd(o.total_ns, a.dur_ns);
    }
    ++kernel_count;
    kernel_time = SaturatingAdd(kernel_time, a.dur_ns);
    if (a.launch_config != 0) {
      auto& use = k.configs[{a.launch_config, a.device}];
      ++use.first;
      use.second = SaturatingAdd(use.second, a.dur_ns);
    }
  }

  void ProcessCopy(const GpuActivity& a, Launch* l) {
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
    // Copies to or from pageable memory block the calling thread whatever the API says.
    const bool pageable =
        a.type == GpuActivity::Type::kMemcpy &&
        (a.src_kind == MemoryKind::kPageable || a.dst_kind == MemoryKind::kPageable);
    if (!pageable || l == nullptr || l->pageable_counted || Blocking(l->name)) return;
    l->pageable_counted = true;
    CountSync(std::string(StripVersion(tables->names.Name(l->name))) + " (pageable copy)", "api",
              l->end - l->start);
    AddApiSync(l->pid, l->tid, l->start, l->end);
  }

  int64_t newest_host_start = INT64_MIN;

  // Finish, in the order the report is assembled (notes come out in this order too).
  void ReportInputs(Report* r) const;
  ReportWindow Window() const;
  OperatorAnalysis OwnOperators();
  std::map<int32_t, DeviceProperties> ReportDevices(Report* r) const;
  void ReportGpus(const ReportWindow& w, const OperatorAnalysis& operators,
                  std::map<int32_t, DeviceProperties>* props, Report* r);
  void ReportQueuesAndDelays(const ReportWindow& w, Report* r);
  std::vector<KernelRow> KernelRows(const OperatorAnalysis& operators,
                                    std::map<int32_t, DeviceProperties>* props, Report* r,
                                    bool* estimated);
  void ReportApis(Report* r, bool* estimated);
  void ReportProcesses(const ReportWindow& w, Report* r);
  void ReportApproximations(bool estimated, Report* r) const;
};

StreamingAnalysis::StreamingAnalysis(const Trace* tables, const AnalysisOptions& options,
                                     const StreamLimits& limits)
    : s_(std::make_unique<State>(tables, options, limits)) {}

StreamingAnalysis::~StreamingAnalysis() = default;

void StreamingAnalysis::Add(const HostCall& call) {
  if (!TimeWithinLimits(call.start_ns, call.dur_ns) || call.name >= s_->tables->names.size()) {
    ++s_->invalid;
    return;
  }
  s_->AddHost(call);
}

void StreamingAnalysis::Add(const GpuActivity& activity, uint32_t launcher) {
  if (!TimeWithinLimits(activity.start_ns, activity.dur_ns) ||
      activity.name >= s_->tables->names.size() ||
      activity.launch_config >= s_->tables->launch_configs.size()) {
    ++s_->invalid;
    return;
  }
  s_->AddGpu(activity, launcher);
}

void StreamingAnalysis::Add(const CpuOp& op) {
  if (!TimeWithinLimits(op.start_ns, op.dur_ns) || op.name >= s_->tables->names.size()) {
    ++s_->invalid;
    return;
  }
  if (s_->ops.size() >= s_->limits.max_cpu_ops) {
    ++s_->ops_dropped;
    return;
  }
  s_->ops.push_back(op);
}

void StreamingAnalysis::Add(const CounterSample& sample) {
  if (!TimeWithinLimits(sample.start_ns, sample.dur_ns)) {
    ++s_->invalid;
    return;
  }
  s_->AddCounters(sample);
}

void StreamingAnalysis::AddInvalid(uint64_t events) {
  s_->invalid = SaturatingAdd(s_->invalid, events);
}

size_t StreamingAnalysis::buffered_events() const { return s_->pending.size(); }
size_t StreamingAnalysis::remembered_launches() const { return s_->launches.size(); }
uint64_t StreamingAnalysis::late_events() const { return s_->late; }

void StreamingAnalysis::State::ReportInputs(Report* r) const {
  uint64_t dropped = invalid;
  for (const InputFile& f : tables->files) {
    r->inputs.push_back({f.path, f.format, f.gzip, f.bytes_read, f.events});
    r->events = SaturatingAdd(r->events, f.events);
    dropped = SaturatingAdd(dropped, f.invalid_events);
  }
  r->invalid_events = dropped;
  if (dropped > 0) {
    r->notes.push_back(absl::StrCat(
        dropped,
        " events skipped: impossible numbers (a time that is NaN, infinite or beyond 1897..2116, "
        "a negative or longer than 36-year duration, a negative size, an id that does not fit). "
        "The report covers the other events; the trace file is corrupt or was not written by a "
        "profiler."));
  }
}

ReportWindow StreamingAnalysis::State::Window() const {
  auto clamp = [](int64_t v) {
    return std::clamp<int64_t>(v, kMinTimeNs, kMaxTimeNs + kMaxDurationNs);
  };
  ReportWindow w;
  if (tables->window_end_ns >= tables->window_start_ns) {
    w.start_ns = clamp(tables->window_start_ns);
    w.end_ns = clamp(tables->window_end_ns);
  }
  w.ns = w.end_ns - w.start_ns;
  w.seconds = w.ns / 1e9;
  return w;
}

// The operator table from the CPU operators kept here, when the caller has none.
OperatorAnalysis StreamingAnalysis::State::OwnOperators() {
  if (ops.empty()) return {};
  Trace ops_only;
  ops_only.names = tables->names;
  ops_only.files = tables->files;
  ops_only.ops = std::move(ops);
  return AnalyzeOperators(ops_only, {}, options);
}

// Device properties: from the trace, or assumed.
std::map<int32_t, DeviceProperties> StreamingAnalysis::State::ReportDevices(Report* r) const {
  std::map<int32_t, DeviceProperties> props;
  std::map<int32_t, bool> assumed;
  for (const DeviceProperties& d : tables->devices) {
    std::string problem = DevicePropertiesProblem(d);
    if (problem.empty()) {
      props.emplace(d.id, d);
    } else if (props.emplace(d.id, DefaultDeviceProperties(d.id)).second) {
      assumed[d.id] = true;
      r->notes.push_back(absl::StrCat("deviceProperties of device ", d.id, " are impossible (",
                                      problem, "): they are ignored."));
    }
  }
  for (int32_t device : devices_used) {
    if (!props.count(device)) {
      props.emplace(device, DefaultDeviceProperties(device));
      assumed[device] = true;
    }
  }
  for (const auto& [id, p] : props) {
    if (!devices_used.contains(id) && !devices_used.empty()) continue;
    r->devices.push_back({id, p.name, p.num_sms, assumed.count(id) > 0});
  }
  if (!assumed.empty()) {
    r->notes.push_back(
        "deviceProperties absent from the trace: occupancy estimated for an assumed H100/H200 "
        "SXM (132 SMs, 2048 threads, 64K registers, 228 KiB shared memory per SM).");
  }
  return props;
}

// One row per (process, GPU): activity counts, busy and idle time, launch delays, the timeline.
void StreamingAnalysis::State::ReportGpus(const ReportWindow& w, const OperatorAnalysis& operators,
                                          std::map<int32_t, DeviceProperties>* props, Report* r) {
  const int bins = std::max(1, options.timeline_bins);
  for (auto& [key, gs] : gpus) {
    GpuRow g;
    g.pid = key.first;
    g.device = key.second;
    g.device_name = (*props)[key.second].name;
    g.kernels = gs.kernels;
    g.memcpys = gs.memcpys;
    g.memsets = gs.memsets;
    g.memcpy_bytes = gs.memcpy_bytes;
    g.kernels_with_launch = gs.kernels_with_launch;
    g.kernels_shorter_than_launch = gs.kernels_shorter_than_launch;
    g.short_kernel_operators = TopLaunchers(gs.short_by_operator, operators);
    g.busy_ns = gs.busy.Length();
    const int64_t all_ns = gs.all.Length();
    g.copy_only_ns = all_ns - g.busy_ns;
    g.idle_ns = w.ns - all_ns;
    g.busy_ratio = w.ns > 0 ? static_cast<double>(g.busy_ns) / w.ns : 0;
    g.launch_rate_per_s = w.seconds > 0 ? g.kernels / w.seconds : 0;
    g.idle = gs.idle;
    if (gs.first_start > w.start_ns) {  // before the first activity
      const int64_t gap = gs.first_start - w.start_ns;
      if (gs.first_launched && gs.first_launch_start > w.start_ns) {
        g.idle.host_wait_ns += gap;
      } else if (gs.first_launched && gap < options.kernel_wait_gap_ns) {
        g.idle.kernel_wait_ns += gap;
      } else {
        g.idle.other_ns += gap;
      }
    }
    if (gs.all.end != INT64_MIN && w.end_ns > gs.all.end) {
      g.idle.host_wait_ns += w.end_ns - gs.all.end;  // nothing more was launched
    }
    if (gs.durations.count() > 0) g.median_kernel_ns = gs.durations.Stats().median_ns;
    g.launch_delay_p50_ns = gs.delays.Percentile(0.50);
    g.launch_delay_p90_ns = gs.delays.Percentile(0.90);
    g.launch_delay_p99_ns = gs.delays.Percentile(0.99);
    if (gs.busy.end != INT64_MIN) gs.slots.Add(gs.busy.start, gs.busy.end);  // the open segment
    g.busy_timeline = gs.slots.Bins(w.start_ns, w.ns, bins);
    r->gpus.push_back(std::move(g));
  }
}

void StreamingAnalysis::State::ReportQueuesAndDelays(const ReportWindow& w, Report* r) {
  for (const auto& [key, q] : streams) {
    if (!q.matched) continue;
    StreamQueueRow row;
    std::tie(row.pid, row.device, row.stream) = key;
    row.kernels = q.kernels;
    row.max_depth = q.max_depth;
    row.avg_depth = w.ns > 0 ? q.area / w.ns : 0;
    r->queues.push_back(row);
  }
  r->launch_delay_p50_ns = all_delays.Percentile(0.50);
  r->launch_delay_p90_ns = all_delays.Percentile(0.90);
  r->launch_delay_p99_ns = all_delays.Percentile(0.99);
  for (size_t i = 0; i < kDelayBins; ++i) {
    r->launch_delay_histogram.push_back(
        {kDelayEdges[i], i + 1 < kDelayBins ? kDelayEdges[i + 1] : INT64_MAX, delay_bins[i]});
  }
  if (unmatched_kernels > 0) {
    r->notes.push_back(absl::StrCat(
        unmatched_kernels,
        " kernels have no launch call with their correlation id (a trace "
        "without CUDA API events, or kernels replayed from CUDA graphs): launch delay, queue "
        "depth and the host-wait/kernel-wait split cover the matched kernels only."));
  }
}

// The kernel summary (cuda_gpu_kern_sum) with occupancy, longest total first.
std::vector<KernelRow> StreamingAnalysis::State::KernelRows(
    const OperatorAnalysis& operators, std::map<int32_t, DeviceProperties>* props, Report* r,
    bool* estimated) {
  struct Occupancy {
    bool known = false;
    bool impossible = false;  // no GPU could run the configuration: counted, not estimated
    OccupancyEstimate estimate;
  };
  std::map<std::pair<uint32_t, int32_t>, Occupancy> occ_cache;
  std::string impossible_example;
  r->kernel_count = kernel_count;
  r->kernel_time_ns = kernel_time;
  r->distinct_kernels = kernels.size();
  std::vector<KernelRow> kernel_rows;
  for (uint32_t name : kernel_order) {
    KernelState& acc = kernels[name];
    KernelRow k;
    k.name = name == kFoldedRow ? std::string(NameTable::kOtherName) : tables->names.Name(name);
    *estimated |= !acc.durations.exact();
    k.stats = acc.durations.Stats();
    k.operators = TopLaunchers(acc.launchers, operators);
    k.time_ratio =
        r->kernel_time_ns > 0 ? static_cast<double>(k.stats.total_ns) / r->kernel_time_ns : 0;
    double occupancy_time = 0, theoretical_time = 0, known_time = 0;
    std::map<uint32_t, uint64_t> configs;
    for (const auto& [key, use] : acc.configs) {
      configs[key.first] += use.first;
      auto it = occ_cache.find(key);
      if (it == occ_cache.end()) {
        Occupancy o;
        const LaunchConfig& config = tables->launch_configs[key.first];
        o.known = EstimateOccupancy(config, (*props)[key.second], &o.estimate);
        if (!o.known) {
          std::string problem = LaunchConfigProblem(config, (*props)[key.second]);
          o.impossible = !problem.empty();
          if (o.impossible && impossible_example.empty()) {
            impossible_example = absl::StrCat("e.g. ", k.name.substr(0, 80), ": ", problem);
          }
        }
        it = occ_cache.emplace(key, o).first;
      }
      if (it->second.impossible) r->impossible_launches += use.first;
      if (it->second.known) {
        occupancy_time += it->second.estimate.achieved_estimate * use.second;
        theoretical_time += it->second.estimate.theoretical * use.second;
        known_time += use.second;
      }
    }
    if (known_time > 0) {
      k.est_occupancy = occupancy_time / known_time;
      k.theoretical_occupancy = theoretical_time / known_time;
    }
    if (acc.counter_time > 0) {
      k.counter_time_ns = acc.counter_time;
      for (size_t i = 0; i < kGpuCounters; ++i) {
        if (acc.counter_weights[i] > 0)
          k.counters[i] = acc.counter_sums[i] / acc.counter_weights[i];
      }
      ClassifyBound(options, &k);
    }
    if (!configs.empty()) {
      auto top = std::max_element(configs.begin(), configs.end(), [](const auto& a, const auto& b) {
        return a.second < b.second || (a.second == b.second && a.first > b.first);
      });
      k.launch_config = ConfigText(tables->launch_configs[top->first]);
      for (const auto& [key, value] : occ_cache) {
        if (key.first == top->first && value.known) {
          k.occupancy_limiter = value.estimate.limiter;
          break;
        }
      }
    }
    kernel_rows.push_back(std::move(k));
  }
  if (r->impossible_launches > 0) {
    r->notes.push_back(absl::StrCat(
        r->impossible_launches, " kernel launches have a launch configuration no GPU can run (",
        impossible_example,
        "): no occupancy is estimated for them. The trace is corrupt or was edited."));
  }
  std::sort(kernel_rows.begin(), kernel_rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.stats.total_ns > b.stats.total_ns ||
           (a.stats.total_ns == b.stats.total_ns && a.name < b.name);
  });
  return kernel_rows;
}

// The CUDA API summary (cuda_api_sum), longest total first.
void StreamingAnalysis::State::ReportApis(Report* r, bool* estimated) {
  r->api_time_ns = api_time;
  for (auto& [name, durations] : api_durations) {
    ApiRow a;
    a.name = name == kFoldedRow ? std::string(NameTable::kOtherName) : tables->names.Name(name);
    *estimated |= !durations.exact();
    a.stats = durations.Stats();
    a.time_ratio = r->api_time_ns > 0 ? static_cast<double>(a.stats.total_ns) / r->api_time_ns : 0;
    r->apis.push_back(std::move(a));
  }
  std::sort(r->apis.begin(), r->apis.end(), [](const ApiRow& a, const ApiRow& b) {
    return a.stats.total_ns > b.stats.total_ns ||
           (a.stats.total_ns == b.stats.total_ns && a.name < b.name);
  });
  if (r->apis.size() > static_cast<size_t>(std::max(0, options.top_apis))) {
    r->apis.resize(std::max(0, options.top_apis));
  }
}

// Processes (their synchronization and kernels), synchronizations and copies.
void StreamingAnalysis::State::ReportProcesses(const ReportWindow& w, Report* r) {
  auto& sync_source = api_sync.empty() ? activity_sync : api_sync;
  for (const auto& [thread, intervals] : sync_source) {
    ProcessRow& p = processes[thread.first];
    p.pid = thread.first;
    p.sync_ns = SaturatingAdd(p.sync_ns, intervals.Length());
  }
  for (const GpuRow& g : r->gpus) {
    ProcessRow& p = processes[g.pid];
    p.pid = g.pid;
    p.kernels += g.kernels;
    p.devices.push_back(g.device);
  }
  for (auto& [pid, p] : processes) {
    p.launch_rate_per_s = w.seconds > 0 ? p.kernels / w.seconds : 0;
    r->processes.push_back(p);
  }
  for (auto& [key, row] : syncs) r->syncs.push_back(row);
  std::stable_sort(r->syncs.begin(), r->syncs.end(),
                   [](const SyncRow& a, const SyncRow& b) { return a.total_ns > b.total_ns; });

  for (auto& [key, c] : copies) {
    c.bandwidth_gbps = c.total_ns > 0 ? static_cast<double>(c.bytes) / c.total_ns : 0;
    r->copies.push_back(c);
  }
  std::stable_sort(r->copies.begin(), r->copies.end(),
                   [](const CopyRow& a, const CopyRow& b) { return a.total_ns > b.total_ns; });
}

// What the report approximates or leaves out, and why.
void StreamingAnalysis::State::ReportApproximations(bool estimated, Report* r) const {
  for (const auto& [key, g] : gpus) estimated |= !g.durations.exact() || !g.delays.exact();
  if (estimated || !all_delays.exact()) {
    r->notes.push_back(
        "More kernel, API and launch-delay values than the analysis keeps exactly: medians and "
        "percentiles are read from histograms (within 0.4 %); counts, totals, min, max and means "
        "stay exact.");
  }
  if (late > 0) {
    r->notes.push_back(
        absl::StrCat(late,
                     " GPU activities arrived more than the reorder window after later ones: the "
                     "busy, idle and queue-depth figures around them are approximate."));
  }
  r->folded_kernels = folded_kernels;
  r->folded_api_calls = folded_api_calls;
  r->folded_names = static_cast<uint64_t>(std::count(folded_ids.begin(), folded_ids.end(), true));
  if (tables->names.folded() > 0)
    ++r->folded_names;  // at least one more the NameTable did not keep
  if (r->folded_names > 0) {
    r->notes.push_back(absl::StrCat(
        "The trace has more distinct names than one analysis keeps (",
        tables->names.limits().max_names, " names, ", limits.max_kernel_names, " kernel rows, ",
        limits.max_api_names, " API rows; a program has a few thousand): ", r->folded_kernels,
        " kernels and ", r->folded_api_calls, " API calls of at least ", r->folded_names,
        " further names are counted in one row, \"", NameTable::kOtherName,
        "\". Counts and times stay exact; only their split by name is lost."));
  }
  if (ops_dropped > 0) {
    r->notes.push_back(absl::StrCat(ops_dropped,
                                    " CPU operators and annotations beyond the most one analysis "
                                    "keeps are left out of the operator table."));
  }
}

Report StreamingAnalysis::Finish(OperatorAnalysis* operators) {
  State& s = *s_;
  s.Drain();
  const AnalysisOptions& options = s.options;
  Report r;
  r.options = options;
  s.ReportInputs(&r);
  const ReportWindow w = s.Window();
  r.window_start_ns = w.start_ns;
  r.window_ns = w.ns;
  // The operator table: the caller's, or from the CPU operators kept here.
  OperatorAnalysis own;
  if (operators == nullptr) {
    own = s.OwnOperators();
    operators = &own;
  }
  std::map<int32_t, DeviceProperties> props = s.ReportDevices(&r);
  s.ReportGpus(w, *operators, &props, &r);
  s.ReportQueuesAndDelays(w, &r);
  bool estimated = false;
  std::vector<KernelRow> kernel_rows = s.KernelRows(*operators, &props, &r, &estimated);
  s.ReportApis(&r, &estimated);
  s.ReportProcesses(w, &r);
  s.ReportApproximations(estimated, &r);

  r.counter_samples = s.counter_samples;
  r.counter_interval_ns =
      s.counter_samples > 0 ? s.counter_time / static_cast<int64_t>(s.counter_samples) : 0;
  r.findings = BuildFindings(r, kernel_rows, options);
  if (kernel_rows.size() > static_cast<size_t>(std::max(0, options.top_kernels))) {
    kernel_rows.resize(std::max(0, options.top_kernels));
  }
  r.top_kernels = std::move(kernel_rows);
  r.operator_summary = operators->summary;
  r.operators = std::move(operators->rows);
  if (r.operators.size() > static_cast<size_t>(std::max(0, options.top_operators))) {
    r.operators.resize(std::max(0, options.top_operators));
  }
  return r;
}

}  // namespace profd::analysis
