// Hardware counters of each GPU for /metrics (issue 11): which CUPTI PM-sampling metric feeds
// which series, and the time-weighted mean of a run of samples. The series are dcgm-exporter's
// profiling fields (DCGM_FI_PROF_*) under profd's names, with the same units: ratios 0..1 for the
// "active" fields, bytes per second for the traffic. PmSampler (pm_sampler.h) reads them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace profd {

struct GpuCounterDef {
  const char* series;        // profd_gpu_<...>
  const char* help;          // says which DCGM field it stands for
  const char* cupti_metric;  // the PM-sampling metric (GH100 names, docs/HARDWARE_COUNTERS.md)
  double scale;              // series value = metric value * scale (percent -> ratio)
};

// In the order of every values vector below.
std::span<const GpuCounterDef> GpuCounterDefs();

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
