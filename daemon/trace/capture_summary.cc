#include "daemon/trace/capture_summary.h"

#include <algorithm>

#include "daemon/checked_math.h"
#include "daemon/trace/event_limits.h"

namespace profd {

uint64_t CaptureSummaryBuilder::UnionLength(std::vector<std::pair<uint64_t, uint64_t>>& intervals,
                                            uint64_t lo, uint64_t hi) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (auto [s, e] : intervals) {
    s = std::max(s, lo);
    e = std::min(e, hi);
    if (e <= s) continue;
    if (open && s <= cur_end) {
      cur_end = std::max(cur_end, e);
    } else {
      if (open) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

void CaptureSummaryBuilder::Add(uint32_t pid, const v1::EventBatch& batch,
                                const StringTable& names) {
  for (const v1::Kernel& k : batch.kernels()) {
    // The trace writer skips these too: a kernel of 2^64 - 1 ns is not a kernel.
    if (!PlausibleInterval(k.start_ns(), k.end_ns())) continue;
    Gpu& gpu = gpus_[{pid, k.device()}];
    gpu.kernels.emplace_back(k.start_ns(), k.end_ns());
    uint64_t d = k.end_ns() > k.start_ns() ? k.end_ns() - k.start_ns() : 0;
    KernelStats& s = kernels_[names.Text(k.name_id())];
    ++s.count;
    s.total = SaturatingAdd(s.total, d);
    s.min = std::min(s.min, d);
    s.max = std::max(s.max, d);
  }
  for (const v1::Memcpy& m : batch.memcpys()) {
    Gpu& gpu = gpus_[{pid, m.device()}];
    gpu.memcpy_bytes = SaturatingAdd(gpu.memcpy_bytes, m.bytes());
    ++gpu.memcpys;
  }
  events_ += static_cast<uint64_t>(batch.kernels_size()) + batch.memcpys_size() +
             batch.memsets_size() + batch.api_calls_size() + batch.syncs_size() +
             batch.memory_ops_size() + batch.overheads_size() + batch.markers_size();
  dropped_ = SaturatingAdd(dropped_, batch.dropped_records());
}

v1::CaptureSummary CaptureSummaryBuilder::Build(uint64_t window_start_ns, uint64_t window_end_ns,
                                                size_t top_kernels) const {
  v1::CaptureSummary summary;
  uint64_t window = window_end_ns > window_start_ns ? window_end_ns - window_start_ns : 0;
  summary.set_window_ns(window);
  summary.set_events(events_);
  summary.set_dropped_records(dropped_);
  for (const auto& [key, gpu] : gpus_) {
    v1::GpuSummary* g = summary.add_gpus();
    g->set_pid(key.first);
    g->set_device(key.second);
    g->set_kernels(gpu.kernels.size());
    g->set_memcpys(gpu.memcpys);
    g->set_memcpy_bytes(gpu.memcpy_bytes);
    auto intervals = gpu.kernels;
    uint64_t busy = UnionLength(intervals, window_start_ns, window_end_ns);
    g->set_busy_ratio(window ? static_cast<double>(busy) / static_cast<double>(window) : 0.0);
  }
  std::vector<std::pair<std::string, KernelStats>> sorted(kernels_.begin(), kernels_.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  if (sorted.size() > top_kernels) sorted.resize(top_kernels);
  for (const auto& [name, s] : sorted) {
    v1::KernelSummary* k = summary.add_top_kernels();
    k->set_name(name);
    k->set_count(s.count);
    k->set_total_ns(s.total);
    k->set_min_ns(s.min);
    k->set_max_ns(s.max);
    k->set_avg_ns(s.count ? static_cast<double>(s.total) / static_cast<double>(s.count) : 0.0);
  }
  return summary;
}

}  // namespace profd
