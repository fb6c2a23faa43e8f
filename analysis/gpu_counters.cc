#include "analysis/gpu_counters.h"

#include <cmath>
#include <limits>

namespace profd {

namespace {

constexpr double kPercent = 0.01;
constexpr GpuCounterDef kDefs[] = {
    {"profd_gpu_sm_active_ratio",
     "Fraction of time each SM had at least one warp resident, averaged over SMs "
     "(DCGM_FI_PROF_SM_ACTIVE; CUPTI PM sampling)",
     "sm__cycles_active.avg.pct_of_peak_sustained_elapsed", kPercent},
    {"profd_gpu_sm_occupancy_ratio",
     "Resident warps over the SMs' maximum, averaged over time and SMs: achieved occupancy "
     "(DCGM_FI_PROF_SM_OCCUPANCY; CUPTI PM sampling)",
     "sm__warps_active.avg.pct_of_peak_sustained_elapsed", kPercent},
    {"profd_gpu_tensor_active_ratio",
     "Fraction of cycles the tensor pipes were busy (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE; CUPTI PM "
     "sampling)",
     "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed", kPercent},
    {"profd_gpu_dram_active_ratio",
     "Device memory throughput over its peak (DCGM_FI_PROF_DRAM_ACTIVE; CUPTI PM sampling)",
     "dram__throughput.avg.pct_of_peak_sustained_elapsed", kPercent},
    {"profd_gpu_graphics_engine_active_ratio",
     "Fraction of time the graphics/compute engine was busy (DCGM_FI_PROF_GR_ENGINE_ACTIVE; "
     "CUPTI PM sampling)",
     "gr__cycles_active.avg.pct_of_peak_sustained_elapsed", kPercent},
    {"profd_gpu_dram_read_bytes_per_second",
     "Bytes read from device memory per second (CUPTI PM "
     "sampling)",
     "dram__bytes_read.sum.per_second", 1},
    {"profd_gpu_dram_write_bytes_per_second",
     "Bytes written to device memory per second (CUPTI PM sampling)",
     "dram__bytes_write.sum.per_second", 1},
    {"profd_gpu_pcie_rx_bytes_per_second",
     "PCIe bytes read per second (DCGM_FI_PROF_PCIE_RX_BYTES; CUPTI PM sampling)",
     "pcie__read_bytes.sum.per_second", 1},
    {"profd_gpu_pcie_tx_bytes_per_second",
     "PCIe bytes written per second (DCGM_FI_PROF_PCIE_TX_BYTES; CUPTI PM sampling)",
     "pcie__write_bytes.sum.per_second", 1},
    {"profd_gpu_nvlink_rx_bytes_per_second",
     "NVLink bytes received per second, headers included (DCGM_FI_PROF_NVLINK_RX_BYTES; CUPTI PM "
     "sampling)",
     "nvlrx__bytes.sum.per_second", 1},
    {"profd_gpu_nvlink_tx_bytes_per_second",
     "NVLink bytes sent per second, headers included (DCGM_FI_PROF_NVLINK_TX_BYTES; CUPTI PM "
     "sampling)",
     "nvltx__bytes.sum.per_second", 1},
    {"profd_gpu_l2_bytes_per_second",
     "Bytes through the L2 cache's slices per second, every client (SMs, copy engines, links; "
     "CUPTI PM sampling)",
     "lts__t_bytes.sum.per_second", 1},
};

static_assert(sizeof(kDefs) / sizeof(kDefs[0]) == kGpuCounters);

constexpr std::string_view kSeriesPrefix = "profd_gpu_";

}  // namespace

std::span<const GpuCounterDef> GpuCounterDefs() { return kDefs; }

std::string_view GpuCounterTraceName(size_t counter) {
  return std::string_view(kDefs[counter].series).substr(kSeriesPrefix.size());
}

float GpuCounterCaptureValue(size_t counter, double series_value) {
  if (!std::isfinite(series_value)) return std::numeric_limits<float>::quiet_NaN();
  if (kDefs[counter].scale != 1) return static_cast<float>(std::round(series_value * 1e4) / 1e4);
  return static_cast<float>(std::round(series_value));
}

int GpuCounterFromTraceName(std::string_view name) {
  for (size_t i = 0; i < kGpuCounters; ++i) {
    if (GpuCounterTraceName(i) == name) return static_cast<int>(i);
  }
  return -1;
}

void GpuCounterMeans::Add(uint64_t start_ns, uint64_t end_ns, std::span<const double> values) {
  if (end_ns <= start_ns) return;
  const double weight = static_cast<double>(end_ns - start_ns);
  for (size_t i = 0; i < sums_.size() && i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    sums_[i] += values[i] * weight;
    weights_[i] += weight;
  }
}

std::vector<double> GpuCounterMeans::Take() {
  std::vector<double> means(sums_.size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < sums_.size(); ++i) {
    if (weights_[i] > 0) means[i] = sums_[i] / weights_[i];
    sums_[i] = weights_[i] = 0;
  }
  return means;
}

}  // namespace profd
