// The summary profctl prints at the end of a capture, built while batches stream through the
// pipeline: per process and GPU, busy time (the union of kernel intervals over the capture
// window) and kernel count; and the top kernels by total GPU time with count, total, avg, min,
// max — the table the seeds read first. Pipeline thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/trace/string_table.h"
#include "profd/v1/events.pb.h"
#include "profd/v1/profd.pb.h"

namespace profd {

class CaptureSummaryBuilder {
 public:
  void Add(uint32_t pid, const v1::EventBatch& batch, const StringTable& names);
  // window: when CUPTI was enabled and disabled (ns, CLOCK_REALTIME).
  v1::CaptureSummary Build(uint64_t window_start_ns, uint64_t window_end_ns,
                           size_t top_kernels = 15) const;

  // Union length of [start, end) intervals clipped to [lo, hi). Sorts its input.
  static uint64_t UnionLength(std::vector<std::pair<uint64_t, uint64_t>>& intervals, uint64_t lo,
                              uint64_t hi);

 private:
  struct Gpu {
    std::vector<std::pair<uint64_t, uint64_t>> kernels;
    uint64_t memcpy_bytes = 0;
    uint64_t memcpys = 0;
  };
  struct KernelStats {
    uint64_t count = 0;
    uint64_t total = 0;
    uint64_t min = UINT64_MAX;
    uint64_t max = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Gpu> gpus_;  // (pid, device)
  std::map<std::string, KernelStats> kernels_;
  uint64_t events_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace profd
