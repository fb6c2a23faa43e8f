#include "daemon/analysis/occupancy.h"

#include <algorithm>

namespace profd::analysis {
namespace {

uint32_t Or(uint32_t v, uint32_t fallback) { return v > 0 ? v : fallback; }
uint64_t RoundUp(uint64_t v, uint64_t granularity) {
  return (v + granularity - 1) / granularity * granularity;
}

}  // namespace

bool EstimateOccupancy(const LaunchConfig& config, const DeviceProperties& device,
                       OccupancyEstimate* out) {
  if (!config.Known()) return false;
  const DeviceProperties defaults = DefaultDeviceProperties(device.id);
  const uint32_t warp = Or(device.warp_size, defaults.warp_size);
  const uint32_t max_threads = Or(device.max_threads_per_sm, defaults.max_threads_per_sm);
  const uint32_t regs_per_sm = Or(device.regs_per_sm, defaults.regs_per_sm);
  const uint32_t smem_per_sm = Or(device.shared_memory_per_sm, defaults.shared_memory_per_sm);
  const uint32_t max_blocks = Or(device.max_blocks_per_sm, defaults.max_blocks_per_sm);
  const uint32_t sms = Or(device.num_sms, defaults.num_sms);
  const int major = device.compute_major > 0 ? device.compute_major : defaults.compute_major;

  OccupancyEstimate e;
  e.warps_per_block = static_cast<uint32_t>((config.ThreadsPerBlock() + warp - 1) / warp);
  e.max_warps_per_sm = max_threads / warp;
  uint64_t limit = e.max_warps_per_sm / e.warps_per_block;
  e.limiter = "warps";
  if (max_blocks < limit) {
    limit = max_blocks;
    e.limiter = "blocks";
  }
  if (config.registers_per_thread > 0) {
    // Registers are allocated per warp in units of 256.
    uint64_t regs_per_warp = RoundUp(uint64_t{config.registers_per_thread} * warp, 256);
    uint64_t by_regs = regs_per_sm / regs_per_warp / e.warps_per_block;
    if (by_regs < limit) {
      limit = by_regs;
      e.limiter = "registers";
    }
  }
  if (config.shared_memory_bytes > 0) {
    // sm_80 and later reserve 1 KiB of shared memory per resident block.
    uint64_t per_block = config.shared_memory_bytes + (major >= 8 ? 1024 : 0);
    uint64_t by_smem = smem_per_sm / per_block;
    if (by_smem < limit) {
      limit = by_smem;
      e.limiter = "shared memory";
    }
  }
  e.active_blocks_per_sm = static_cast<uint32_t>(limit);
  e.blocks_per_sm = static_cast<double>(config.Blocks()) / sms;
  e.theoretical = static_cast<double>(limit * e.warps_per_block) / e.max_warps_per_sm;
  double resident = std::min<double>(static_cast<double>(limit), e.blocks_per_sm);
  if (e.blocks_per_sm < static_cast<double>(limit)) e.limiter = "grid";
  e.achieved_estimate = resident * e.warps_per_block / e.max_warps_per_sm;
  *out = e;
  return true;
}

}  // namespace profd::analysis
