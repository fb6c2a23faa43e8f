// Estimated occupancy of a kernel launch from its grid, block, registers and shared memory and
// the device's limits: the CUDA occupancy calculator's resource limits, then capped by how many
// blocks the grid gives each SM (a small grid cannot fill the GPU however light its blocks).
#pragma once

#include <cstdint>
#include <string>

#include "daemon/analysis/trace_model.h"

namespace profd::analysis {

struct OccupancyEstimate {
  uint32_t warps_per_block = 0;
  uint32_t max_warps_per_sm = 0;
  uint32_t active_blocks_per_sm = 0;  // resident blocks the resources allow
  double blocks_per_sm = 0;           // grid blocks / SMs
  double theoretical = 0;             // active_blocks * warps_per_block / max warps
  double achieved_estimate = 0;       // min(active_blocks, blocks_per_sm) * warps_per_block / max
  std::string limiter;                // "warps", "registers", "shared memory", "blocks", "grid"
};

// Fails (returns false) when the launch configuration is unknown.
bool EstimateOccupancy(const LaunchConfig& config, const DeviceProperties& device,
                       OccupancyEstimate* out);

}  // namespace profd::analysis
