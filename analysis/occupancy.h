// Estimated occupancy of a kernel launch from its grid, block, registers and shared memory and
// the device's limits: the CUDA occupancy calculator's resource limits, then capped by how many
// blocks the grid gives each SM (a small grid cannot fill the GPU however light its blocks).
#pragma once

#include <cstdint>
#include <string>

#include "analysis/trace_model.h"

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

// Fails (returns false) when the launch configuration is unknown, or impossible on the device
// (LaunchConfigProblem says why). Device properties that DevicePropertiesProblem rejects are
// replaced by the assumed H100/H200 ones.
bool EstimateOccupancy(const LaunchConfig& config, const DeviceProperties& device,
                       OccupancyEstimate* out);

// Why no GPU could run this launch on the device ("block [65536,65536,32] has 137438953472
// threads, the device allows 1024 per block"), or "" when it could (or is unknown).
std::string LaunchConfigProblem(const LaunchConfig& config, const DeviceProperties& device);

// Why these device properties cannot be a GPU's (a warp of 0 threads, more threads per block
// than per SM...), or "" when they are plausible. Zero means "not given" and is not a problem.
std::string DevicePropertiesProblem(const DeviceProperties& device);

}  // namespace profd::analysis
