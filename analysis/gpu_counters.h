// Hardware counters of each GPU for /metrics (issue 11): which CUPTI PM-sampling metric feeds
// which series, and the time-weighted mean of a run of samples. The series are dcgm-exporter's
// profiling fields (DCGM_FI_PROF_*) under profd's names, with the same units: ratios 0..1 for the
// "active" fields, bytes per second for the traffic. PmSampler (pm_sampler.h) reads them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace profd {

struct GpuCounterDef {
  const char* series;        // profd_gpu_<...>
  const char* help;          // says which DCGM field it stands for
  const char* cupti_metric;  // the PM-sampling metric (GH100 names, docs/HARDWARE_COUNTERS.md)
  double scale;              // series value = metric value * scale (percent -> ratio)
};

// In the order of every values vector below.
inline constexpr size_t kGpuCounters = 12;
std::span<const GpuCounterDef> GpuCounterDefs();

// A counter's name in a trace (profctl capture --gpu-metrics) and in reports: its series name
// without "profd_gpu_" ("sm_active_ratio", "dram_read_bytes_per_second"). The one mapping both
// ways; -1 for a name that is none of them.
std::string_view GpuCounterTraceName(size_t counter);
int GpuCounterFromTraceName(std::string_view name);

// A counter's value in its series' unit as a capture keeps it: ratios to 4 decimals, traffic to
// the byte per second. The trace prints exactly that, so the capture's own report and one read
// back from its trace (profctl report) see the same numbers.
float GpuCounterCaptureValue(size_t counter, double series_value);

// One PM sample of one GPU as a capture takes it: [start_ns, end_ns) on CUPTI's clock (the
// trace's), each counter as GpuCounterCaptureValue gives it; NaN: not measured.
struct GpuCounterReading {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  std::array<float, kGpuCounters> values{};
};

// The readings of one GPU from one decode, in time order.
struct GpuCounterBatch {
  uint32_t cuda_index = 0;  // profd's CUDA ordinal (every GPU visible)
  std::string uuid;         // matches the agents' DeviceInfo.uuid across CUDA_VISIBLE_DEVICES
  std::vector<GpuCounterReading> readings;
};

// The time-weighted mean of each counter over the samples added since the last Take (PM samples
// are back to back; the weight makes a short sample at a decode boundary count for its length).
// A counter that no sample measured (NaN) is NaN.
class GpuCounterMeans {
 public:
  explicit GpuCounterMeans(size_t counters) : sums_(counters), weights_(counters) {}
  void Add(uint64_t start_ns, uint64_t end_ns, std::span<const double> values);
  // The means, then starts over.
  std::vector<double> Take();

 private:
  std::vector<double> sums_;
  std::vector<double> weights_;
};

}  // namespace profd
