// Each finding fires when its condition holds and stays silent when it does not, and says the
// threshold it applied.
#include <string>
#include <vector>

#include "daemon/analysis/analysis.h"
#include "daemon/analysis/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using testing::KernelShape;
using testing::KinetoTraceBuilder;

// A launch configuration that fills an H100 (100% estimated occupancy).
const KernelShape kFull{{10000, 1, 1}, {256, 1, 1}, 32, 0};

Report ReportOf(const KinetoTraceBuilder& b, const AnalysisOptions& o = {}) {
  Trace t;
  absl::Status s = ReadTraceBuffer(b.Json(), "test", &t);
  EXPECT_TRUE(s.ok()) << s;
  return Analyze(t, o);
}

const Finding* Find(const Report& r, const std::string& id) {
  for (const Finding& f : r.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

std::vector<std::string> Ids(const Report& r) {
  std::vector<std::string> ids;
  for (const Finding& f : r.findings) ids.push_back(f.id);
  return ids;
}

// n kernels of kernel_us each, one every period_us, launched just before (launch_us long), on
// a GPU otherwise idle; distinct names so no kernel dominates.
KinetoTraceBuilder Periodic(int n, double kernel_us, double period_us, double launch_us = 2,
                            int names = 10) {
  KinetoTraceBuilder b;
  for (int i = 0; i < n; ++i) {
    double t = i * period_us;
    b.Launch("kernel_" + std::to_string(i % names), t, launch_us, t + launch_us + 1, kernel_us, 0,
             7, kFull);
  }
  b.DeviceProperties();
  return b;
}

TEST(FindingsTest, GpuIdleFiresBelowHalfBusyWithHostWaitEvidence) {
  // 10 µs kernels every 100 µs, each launched after the previous ended: ~10% busy, host wait.
  Report r = ReportOf(Periodic(20, 10, 100, 2));
  const Finding* f = Find(r, "gpu_idle");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_EQ(f->severity, "critical");
  EXPECT_NEAR(f->value, 200.0 / 1913, 1e-3);  // 20 x 10 µs over 0..1913 µs
  EXPECT_THAT(f->title, HasSubstr("CPU- or input-bound"));
  EXPECT_THAT(f->threshold, HasSubstr("< 50.0%"));
  EXPECT_THAT(f->evidence[1], HasSubstr("host wait"));
  EXPECT_THAT(f->advice[0], HasSubstr("Host wait dominates"));
}

TEST(FindingsTest, GpuIdleSilentWhenBusyAndFollowsItsThreshold) {
  Report busy = ReportOf(Periodic(20, 60, 100, 2));  // ~60% busy
  EXPECT_EQ(Find(busy, "gpu_idle"), nullptr);
  AnalysisOptions strict;
  strict.idle_busy_below = 0.7;
  Report r = ReportOf(Periodic(20, 60, 100, 2), strict);
  ASSERT_NE(Find(r, "gpu_idle"), nullptr);
  EXPECT_THAT(Find(r, "gpu_idle")->threshold, HasSubstr("< 70.0%"));
}

TEST(FindingsTest, LaunchBoundFiresForManyKernelsShorterThanTheirLaunch) {
  // 200 kernels of 3 µs, each launched by a 5 µs call, one every 8 µs: busy 3/8.
  Report r = ReportOf(Periodic(200, 3, 8, 5));
  const Finding* f = Find(r, "launch_bound");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_DOUBLE_EQ(f->value, 1.0);  // every kernel shorter than its launch call
  EXPECT_THAT(f->threshold, HasSubstr(">= 100 kernels"));
  EXPECT_THAT(f->evidence[1], HasSubstr("200 of 200 kernels (100.0%) ran shorter"));
  EXPECT_THAT(f->advice[0], HasSubstr("CUDA Graph"));
  EXPECT_THAT(f->advice[1], HasSubstr("torch.compile"));
}

TEST(FindingsTest, LaunchBoundFiresOnTinyMedianEvenWithShortLaunches) {
  // Launch calls of 1 µs, kernels of 4 µs (longer than the launch), median 4 µs < 10 µs.
  Report r = ReportOf(Periodic(200, 4, 12, 1));
  const Finding* f = Find(r, "launch_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_DOUBLE_EQ(f->value, 0.0);
}

TEST(FindingsTest, LaunchBoundSilentForLongKernelsFewKernelsOrBusyGpu) {
  EXPECT_EQ(Find(ReportOf(Periodic(200, 50, 100, 5)), "launch_bound"), nullptr);  // 50 µs each
  EXPECT_EQ(Find(ReportOf(Periodic(99, 3, 8, 5)), "launch_bound"), nullptr);      // < 100
  // Short kernels queued back to back keep the GPU busy: not launch-bound.
  KinetoTraceBuilder b;
  for (int i = 0; i < 200; ++i) b.Launch("k" + std::to_string(i % 10), i * 0.5, 0.4, 2 + i * 3, 3);
  EXPECT_EQ(Find(ReportOf(b), "launch_bound"), nullptr);
}

TEST(FindingsTest, CopiesInTheHotPathFireAboveFivePercent) {
  // 1000 µs window, pinned HtoD copies taking 100 µs of GPU time: 10%.
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 1000);
  for (int i = 0; i < 10; ++i)
    b.Copy("HtoD", "Pinned", "Device", i * 100, 2, i * 100 + 5, 10, 1 << 20);
  Report r = ReportOf(b);
  const Finding* f = Find(r, "copies_hot_path");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_NEAR(f->value, 0.10, 1e-9);
  EXPECT_THAT(f->evidence[0], HasSubstr("HtoD Pinned: 10 copies, 10.0 MiB"));
  EXPECT_THAT(f->advice[0], HasSubstr("Keep tensors on the device"));
  EXPECT_EQ(Find(r, "pageable_memory"), nullptr);  // pinned

  KinetoTraceBuilder small;
  small.CpuOp("step", 0, 1000);
  for (int i = 0; i < 2; ++i)
    small.Copy("HtoD", "Pinned", "Device", i * 100, 2, i * 100 + 5, 10, 4096);
  EXPECT_EQ(Find(ReportOf(small), "copies_hot_path"), nullptr);  // 2%
}

TEST(FindingsTest, PageableMemoryFiresOnCountOrBytes) {
  KinetoTraceBuilder many;
  many.CpuOp("step", 0, 100000);
  for (int i = 0; i < 10; ++i)
    many.Copy("DtoH", "Device", "Pageable", i * 100, 5, i * 100 + 2, 2, 64);
  Report r = ReportOf(many);
  const Finding* f = Find(r, "pageable_memory");
  ASSERT_NE(f, nullptr);
  EXPECT_THAT(f->title, HasSubstr("10 copies use pageable host memory"));
  EXPECT_THAT(f->advice[0], HasSubstr("pin_memory"));

  KinetoTraceBuilder few;
  few.CpuOp("step", 0, 100000);
  for (int i = 0; i < 9; ++i)
    few.Copy("DtoH", "Device", "Pageable", i * 100, 5, i * 100 + 2, 2, 64);
  EXPECT_EQ(Find(ReportOf(few), "pageable_memory"), nullptr);

  KinetoTraceBuilder big;
  big.CpuOp("step", 0, 100000);
  big.Copy("HtoD", "Pageable", "Device", 0, 500, 10, 400, 2 << 20);
  ASSERT_NE(Find(ReportOf(big), "pageable_memory"), nullptr);
}

TEST(FindingsTest, SyncStallFiresWhenTheHostWaitsTenPercent) {
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 1000);
  b.Launch("k", 0, 5, 10, 300, 0, 7, kFull);
  b.Runtime("cudaStreamSynchronize", 6, 305);  // .item() waiting for the kernel
  b.Runtime("cudaDeviceSynchronize", 700, 20);
  Report r = ReportOf(b);
  const Finding* f = Find(r, "sync_stall");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_NEAR(f->value, 0.325, 1e-9);
  EXPECT_EQ(f->severity, "critical");  // >= 30%
  EXPECT_THAT(f->evidence[0], HasSubstr("cudaStreamSynchronize (api): 1 calls"));
  EXPECT_THAT(f->advice[0], HasSubstr(".item()"));

  KinetoTraceBuilder light;
  light.CpuOp("step", 0, 1000);
  light.Runtime("cudaStreamSynchronize", 6, 50);
  EXPECT_EQ(Find(ReportOf(light), "sync_stall"), nullptr);  // 5%
}

TEST(FindingsTest, DominantKernelsShowCountTimesTime) {
  KinetoTraceBuilder b;
  double t = 0;
  for (int i = 0; i < 1000; ++i, t += 20) b.Launch("small_but_many", t, 1, t + 2, 10, 0, 7, kFull);
  b.Launch("big", t, 1, t + 2, 2000, 0, 7, kFull);
  t += 2100;
  for (const char* name : {"x", "y", "z"}) b.Launch(name, t, 1, t + 2, 100, 0, 7, kFull), t += 200;
  Report r = ReportOf(b);
  const Finding* f = Find(r, "dominant_kernels");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_THAT(f->title, HasSubstr("3 of 5 kernels"));
  EXPECT_THAT(f->evidence[0], HasSubstr("small_but_many: 1,000 x 10.0 µs = 10.00 ms"));
  EXPECT_THAT(f->evidence[1], HasSubstr("big: 1 x 2.00 ms = 2.00 ms"));
  EXPECT_THAT(f->advice[1], HasSubstr("short kernels called many times"));

  // Ten kernels sharing the time evenly: the top 3 hold 30%.
  KinetoTraceBuilder even;
  for (int i = 0; i < 10; ++i) even.Launch("k" + std::to_string(i), i * 100, 1, i * 100 + 2, 50);
  EXPECT_EQ(Find(ReportOf(even), "dominant_kernels"), nullptr);
  // Three kernels only: trivially "dominant", not reported.
  KinetoTraceBuilder three;
  for (int i = 0; i < 3; ++i) three.Launch("k" + std::to_string(i), i * 100, 1, i * 100 + 2, 50);
  EXPECT_EQ(Find(ReportOf(three), "dominant_kernels"), nullptr);
}

TEST(FindingsTest, LowOccupancyNamesTheLimiter) {
  KinetoTraceBuilder b;
  // 8 blocks on 132 SMs: ~1.5% estimated; 60% of kernel time.
  b.Launch("tiny_grid_gemm", 0, 1, 2, 60, 0, 7, KernelShape{{8, 1, 1}, {256, 1, 1}, 32, 0});
  b.Launch("full", 100, 1, 102, 40, 0, 7, kFull);
  Report r = ReportOf(b);
  const Finding* f = Find(r, "low_occupancy");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(Ids(r));
  EXPECT_NEAR(f->value, 0.6, 1e-9);
  EXPECT_THAT(f->evidence[0], HasSubstr("limited by grid"));
  EXPECT_THAT(f->evidence[0], HasSubstr("grid [8,1,1] block [256,1,1]"));
  EXPECT_THAT(f->advice[0], HasSubstr("Grid too small"));

  KinetoTraceBuilder ok;
  ok.Launch("full", 0, 1, 2, 60, 0, 7, kFull);
  ok.Launch("tiny", 100, 1, 102, 5, 0, 7, KernelShape{{8, 1, 1}, {256, 1, 1}, 32, 0});  // 7.7%
  EXPECT_EQ(Find(ReportOf(ok), "low_occupancy"), nullptr);
}

TEST(FindingsTest, HealthyTraceHasNoFindings) {
  // Long, full kernels back to back, queued ahead, no copies or syncs.
  KinetoTraceBuilder b;
  for (int i = 0; i < 200; ++i)
    b.Launch("k" + std::to_string(i % 10), i * 5.0, 4, 100 + i * 100.0, 100, 0, 7, kFull);
  Report r = ReportOf(b);
  EXPECT_TRUE(r.findings.empty()) << ::testing::PrintToString(Ids(r));
}

}  // namespace
}  // namespace profd::analysis
