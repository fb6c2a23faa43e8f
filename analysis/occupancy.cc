#include "analysis/occupancy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace profd::analysis {
namespace {

uint32_t Or(uint32_t v, uint32_t fallback) { return v > 0 ? v : fallback; }
uint64_t RoundUp(uint64_t v, uint64_t granularity) {
  return (v + granularity - 1) / granularity * granularity;
}

// The limits the estimate uses: the device's where it gives them, else the assumed GPU's.
struct Limits {
  uint32_t warp, max_threads, max_threads_per_block, regs_per_sm, smem_per_sm, max_blocks, sms;
  int major;
};

Limits LimitsOf(const DeviceProperties& given) {
  const DeviceProperties defaults = DefaultDeviceProperties(given.id);
  // Properties no GPU can have (a trace's numbers are untrusted) are all replaced: mixing a
  // corrupt warp size with real SM counts would give a number that looks right and is not.
  const DeviceProperties& d = DevicePropertiesProblem(given).empty() ? given : defaults;
  Limits l;
  l.warp = Or(d.warp_size, defaults.warp_size);
  l.max_threads = Or(d.max_threads_per_sm, defaults.max_threads_per_sm);
  l.max_threads_per_block = Or(d.max_threads_per_block, defaults.max_threads_per_block);
  l.regs_per_sm = Or(d.regs_per_sm, defaults.regs_per_sm);
  l.smem_per_sm = Or(d.shared_memory_per_sm, defaults.shared_memory_per_sm);
  l.max_blocks = Or(d.max_blocks_per_sm, defaults.max_blocks_per_sm);
  l.sms = Or(d.num_sms, defaults.num_sms);
  l.major = d.compute_major > 0 ? d.compute_major : defaults.compute_major;
  // A device that gives a small warp size but no thread limit would pair it with the default:
  // keep every warp count at least 1.
  if (l.max_threads < l.warp) l.max_threads = l.warp;
  return l;
}

}  // namespace

std::string DevicePropertiesProblem(const DeviceProperties& d) {
  // Generous bounds around every GPU so far (warp 32, 2048 threads, 64 Ki registers, 228 KiB
  // shared memory, 32 blocks, 144 SMs per device): they only reject what cannot be a GPU, and
  // they keep every product and quotient of the estimate far from overflow and from zero.
  if (d.warp_size > 1024) return absl::StrCat("warpSize ", d.warp_size, " (more than 1024)");
  if (d.max_threads_per_sm > (1u << 20)) {
    return absl::StrCat("maxThreadsPerMultiprocessor ", d.max_threads_per_sm);
  }
  if (d.warp_size > 0 && d.max_threads_per_sm > 0 && d.max_threads_per_sm < d.warp_size) {
    return absl::StrCat("maxThreadsPerMultiprocessor ", d.max_threads_per_sm, " below warpSize ",
                        d.warp_size);
  }
  if (d.max_threads_per_block > (1u << 20)) {
    return absl::StrCat("maxThreadsPerBlock ", d.max_threads_per_block);
  }
  if (d.max_blocks_per_sm > (1u << 16)) {
    return absl::StrCat("maxBlocksPerMultiprocessor ", d.max_blocks_per_sm);
  }
  if (d.num_sms > (1u << 16)) return absl::StrCat("numSms ", d.num_sms);
  return "";
}

std::string LaunchConfigProblem(const LaunchConfig& config, const DeviceProperties& device) {
  if (!config.Known()) return "";
  const Limits l = LimitsOf(device);
  const uint64_t threads = config.ThreadsPerBlock();
  auto shape = [&] {
    return absl::StrCat("block [", config.block[0], ",", config.block[1], ",", config.block[2],
                        "] has ", threads, " threads");
  };
  if (threads > l.max_threads_per_block) {
    return absl::StrCat(shape(), ", the device allows ", l.max_threads_per_block, " per block");
  }
  if (threads > l.max_threads) {
    return absl::StrCat(shape(), ", the device has ", l.max_threads, " per SM");
  }
  return "";
}

bool EstimateOccupancy(const LaunchConfig& config, const DeviceProperties& device,
                       OccupancyEstimate* out) {
  if (!config.Known() || !LaunchConfigProblem(config, device).empty()) return false;
  const Limits l = LimitsOf(device);

  // From here: 1 <= threads <= max_threads <= 2^20 and 1 <= warp <= max_threads, so every
  // count below is at least 1 and every product fits.
  OccupancyEstimate e;
  e.warps_per_block = static_cast<uint32_t>((config.ThreadsPerBlock() + l.warp - 1) / l.warp);
  e.max_warps_per_sm = l.max_threads / l.warp;
  uint64_t limit = e.max_warps_per_sm / e.warps_per_block;
  e.limiter = "warps";
  if (l.max_blocks < limit) {
    limit = l.max_blocks;
    e.limiter = "blocks";
  }
  if (config.registers_per_thread > 0) {
    // Registers are allocated per warp in units of 256.
    uint64_t regs_per_warp = RoundUp(uint64_t{config.registers_per_thread} * l.warp, 256);
    uint64_t by_regs = l.regs_per_sm / regs_per_warp / e.warps_per_block;
    if (by_regs < limit) {
      limit = by_regs;
      e.limiter = "registers";
    }
  }
  if (config.shared_memory_bytes > 0) {
    // sm_80 and later reserve 1 KiB of shared memory per resident block.
    uint64_t per_block = uint64_t{config.shared_memory_bytes} + (l.major >= 8 ? 1024 : 0);
    uint64_t by_smem = l.smem_per_sm / per_block;
    if (by_smem < limit) {
      limit = by_smem;
      e.limiter = "shared memory";
    }
  }
  e.active_blocks_per_sm = static_cast<uint32_t>(limit);
  e.blocks_per_sm = static_cast<double>(config.Blocks()) / l.sms;
  e.theoretical = static_cast<double>(limit * e.warps_per_block) / e.max_warps_per_sm;
  double resident = std::min<double>(static_cast<double>(limit), e.blocks_per_sm);
  if (e.blocks_per_sm < static_cast<double>(limit)) e.limiter = "grid";
  e.achieved_estimate = resident * e.warps_per_block / e.max_warps_per_sm;
  *out = e;
  return true;
}

}  // namespace profd::analysis
