// Occupancy estimates against hand-computed cases (H100 SXM limits: 64 warps, 64K registers,
// 228 KiB shared memory, 32 blocks per SM, 132 SMs).
#include "analysis/occupancy.h"

#include "analysis/analysis.h"
#include "analysis/trace_reader.h"
#include "gtest/gtest.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

LaunchConfig Config(uint32_t grid, uint32_t block, uint32_t regs, uint32_t smem) {
  LaunchConfig c;
  c.grid[0] = grid;
  c.grid[1] = c.grid[2] = 1;
  c.block[0] = block;
  c.block[1] = c.block[2] = 1;
  c.registers_per_thread = regs;
  c.shared_memory_bytes = smem;
  return c;
}

TEST(OccupancyTest, SmallGridCapsAchievedOccupancy) {
  // 256 threads = 8 warps; 64 regs x 32 = 2048 per warp -> 32 warps -> 4 blocks (50%).
  // 264 blocks / 132 SMs = 2 blocks per SM -> 16 warps of 64 = 25%.
  OccupancyEstimate e;
  ASSERT_TRUE(EstimateOccupancy(Config(264, 256, 64, 0), DefaultDeviceProperties(0), &e));
  EXPECT_EQ(e.warps_per_block, 8u);
  EXPECT_EQ(e.active_blocks_per_sm, 4u);
  EXPECT_DOUBLE_EQ(e.theoretical, 0.5);
  EXPECT_DOUBLE_EQ(e.blocks_per_sm, 2.0);
  EXPECT_DOUBLE_EQ(e.achieved_estimate, 0.25);
  EXPECT_EQ(e.limiter, "grid");
}

TEST(OccupancyTest, SharedMemoryRegistersAndWarpLimits) {
  OccupancyEstimate e;
  // 48 KiB + 1 KiB reserved per block: 233472 / 50176 = 4 blocks of 4 warps = 25%.
  ASSERT_TRUE(EstimateOccupancy(Config(10000, 128, 32, 49152), DefaultDeviceProperties(0), &e));
  EXPECT_EQ(e.active_blocks_per_sm, 4u);
  EXPECT_DOUBLE_EQ(e.theoretical, 0.25);
  EXPECT_DOUBLE_EQ(e.achieved_estimate, 0.25);
  EXPECT_EQ(e.limiter, "shared memory");
  // 128 regs x 32 = 4096 per warp -> 16 warps -> 2 blocks of 8 warps = 25%.
  ASSERT_TRUE(EstimateOccupancy(Config(10000, 256, 128, 0), DefaultDeviceProperties(0), &e));
  EXPECT_EQ(e.active_blocks_per_sm, 2u);
  EXPECT_DOUBLE_EQ(e.theoretical, 0.25);
  EXPECT_EQ(e.limiter, "registers");
  // 1024 threads = 32 warps -> 2 blocks = 100%.
  ASSERT_TRUE(EstimateOccupancy(Config(10000, 1024, 32, 0), DefaultDeviceProperties(0), &e));
  EXPECT_DOUBLE_EQ(e.achieved_estimate, 1.0);
  EXPECT_EQ(e.limiter, "warps");
  // 32 threads = 1 warp: at most 32 blocks per SM = 50%.
  ASSERT_TRUE(EstimateOccupancy(Config(10000, 32, 16, 0), DefaultDeviceProperties(0), &e));
  EXPECT_DOUBLE_EQ(e.theoretical, 0.5);
  EXPECT_EQ(e.limiter, "blocks");
  // Unknown launch configuration.
  EXPECT_FALSE(EstimateOccupancy(LaunchConfig{}, DefaultDeviceProperties(0), &e));
}

TEST(OccupancyTest, UsesTheTracesDeviceProperties) {
  // Same launch on a 66-SM device: 4 blocks per SM available, so 4 x 8 warps = 50%.
  testing::KinetoTraceBuilder b;
  b.Launch("k", 0, 1, 2, 10, 0, 7, testing::KernelShape{{264, 1, 1}, {256, 1, 1}, 64, 0});
  b.DeviceProperties(0, /*num_sms=*/66);
  Trace t;
  ASSERT_TRUE(ReadTraceBuffer(b.Json(), "t", &t).ok());
  Report r = Analyze(t);
  ASSERT_EQ(r.top_kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(r.top_kernels[0].est_occupancy, 0.5);
  EXPECT_DOUBLE_EQ(r.top_kernels[0].theoretical_occupancy, 0.5);
  EXPECT_EQ(r.top_kernels[0].launch_config, "grid [264,1,1] block [256,1,1] regs 64 smem 0");
  EXPECT_FALSE(r.devices[0].assumed);
  EXPECT_EQ(r.devices[0].num_sms, 66u);
}

TEST(OccupancyTest, TimeWeightedPerKernel) {
  // 30 µs at 25% (2 blocks per SM) and 10 µs at 50% (4 per SM): (30x0.25 + 10x0.5) / 40.
  testing::KinetoTraceBuilder b;
  b.Launch("k", 0, 1, 2, 30, 0, 7, testing::KernelShape{{264, 1, 1}, {256, 1, 1}, 64, 0});
  b.Launch("k", 40, 1, 42, 10, 0, 7, testing::KernelShape{{528, 1, 1}, {256, 1, 1}, 64, 0});
  Trace t;
  ASSERT_TRUE(ReadTraceBuffer(b.Json(), "t", &t).ok());
  Report r = Analyze(t);
  ASSERT_EQ(r.top_kernels.size(), 1u);
  EXPECT_DOUBLE_EQ(r.top_kernels[0].est_occupancy, (30 * 0.25 + 10 * 0.5) / 40);
  EXPECT_TRUE(r.devices[0].assumed);
}

}  // namespace
}  // namespace profd::analysis
