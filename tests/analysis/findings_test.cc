// Each finding fires when its condition holds and stays silent when it does not, and says the
// threshold it applied.
#include "analysis/findings.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analysis.h"
#include "analysis/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::KernelShape;
using testing::KinetoTraceBuilder;
using ::testing::Not;

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

// A launch-bound GPU is mostly idle too, with the host's time in the gaps: the idle finding
// points at the launches, not at input loading (DataLoader workers would not help).
TEST(FindingsTest, GpuIdleOfALaunchBoundGpuDefersToLaunchBound) {
  // 200 kernels of 2 µs, each launched by a 5 µs call, one every 20 µs: 10% busy, host wait.
  Report r = ReportOf(Periodic(200, 2, 20, 5));
  ASSERT_NE(Find(r, "launch_bound"), nullptr) << ::testing::PrintToString(Ids(r));
  const Finding* idle = Find(r, "gpu_idle");
  ASSERT_NE(idle, nullptr);
  EXPECT_THAT(idle->title, HasSubstr("launch-bound: see launch_bound"));
  EXPECT_THAT(idle->title, Not(HasSubstr("input-bound")));
  for (const std::string& advice : idle->advice) {
    EXPECT_THAT(advice, Not(HasSubstr("DataLoader"))) << advice;
  }
  EXPECT_THAT(idle->advice[0], HasSubstr("launch_bound"));
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A kernel row as the analysis leaves it with hardware counters over all its time: share of
// kernel time (of 1 s), median instance, and the counters ClassifyBound reads (NaN: not
// measured).
KernelRow Measured(const std::string& name, double share, double median_ns, double sm,
                   double tensor, double dram, double occupancy = kNaN) {
  KernelRow k;
  k.name = name;
  k.time_ratio = share;
  k.stats.total_ns = static_cast<int64_t>(share * 1e9);
  k.stats.count = 100;
  k.stats.median_ns = median_ns;
  k.counter_time_ns = k.stats.total_ns;
  k.counters[GpuCounterFromTraceName("sm_active_ratio")] = sm;
  k.counters[GpuCounterFromTraceName("tensor_active_ratio")] = tensor;
  k.counters[GpuCounterFromTraceName("dram_active_ratio")] = dram;
  k.counters[GpuCounterFromTraceName("sm_occupancy_ratio")] = occupancy;
  return k;
}

KernelRow Classified(KernelRow k, const AnalysisOptions& o = {}) {
  ClassifyBound(o, &k);
  return k;
}

TEST(ClassifyBoundTest, TensorPipesBusyIsComputeBound) {
  KernelRow k = Classified(Measured("gemm", 0.5, 200'000, 0.95, 0.82, 0.12));
  EXPECT_EQ(k.bound, "compute");
  EXPECT_EQ(k.bound_reason, "tensor pipes 82.0% busy, DRAM 12.0% of peak");
  // Streaming its operands near DRAM peak does not make a GEMM memory-bound: the pipes win.
  KernelRow both = Classified(Measured("gemm", 0.5, 200'000, 0.95, 0.45, 0.70));
  EXPECT_EQ(both.bound, "compute");
}

TEST(ClassifyBoundTest, SmsBusyWithoutTensorOrDramIsComputeBound) {
  KernelRow k = Classified(Measured("fma_loop", 0.5, 200'000, 0.85, 0.03, 0.20, 0.12));
  EXPECT_EQ(k.bound, "compute");
  EXPECT_EQ(k.bound_reason, "SMs active 85.0%, tensor 3.0%, DRAM 20.0%");
}

TEST(ClassifyBoundTest, DramNearPeakIsMemoryBoundWithItsThroughput) {
  KernelRow k = Measured("vectorized_elementwise", 0.3, 50'000, 0.90, 0.0, 0.91);
  k.counters[GpuCounterFromTraceName("dram_read_bytes_per_second")] = 2.6e12;
  k.counters[GpuCounterFromTraceName("dram_write_bytes_per_second")] = 1.3e12;
  k = Classified(k);
  EXPECT_EQ(k.bound, "memory");
  EXPECT_EQ(k.bound_reason, "DRAM 91.0% of peak (3900.0 GB/s)");
  // Without the byte counters the ratio alone says it.
  KernelRow ratio_only = Classified(Measured("copy", 0.3, 50'000, 0.9, 0.0, 0.75));
  EXPECT_EQ(ratio_only.bound_reason, "DRAM 75.0% of peak");
}

TEST(ClassifyBoundTest, ShortKernelOnIdleSmsIsLaunchBound) {
  KernelRow k = Classified(Measured("add_kernel", 0.1, 2'100, 0.18, 0.0, 0.05));
  EXPECT_EQ(k.bound, "launch");
  EXPECT_EQ(k.bound_reason, "median 2.1 µs, SMs active 18.0%");
  // The same counters on a kernel long enough to fill the GPU: latency.
  EXPECT_EQ(Classified(Measured("add_kernel", 0.1, 10'000, 0.18, 0.0, 0.05)).bound, "latency");
}

TEST(ClassifyBoundTest, LongKernelWithNothingBusyIsLatencyBound) {
  KernelRow k = Classified(Measured("scan", 0.2, 80'000, 0.65, 0.03, 0.20, 0.12));
  EXPECT_EQ(k.bound, "latency");
  EXPECT_EQ(k.bound_reason, "SMs active 65.0%, tensor 3.0%, DRAM 20.0%, occupancy 12.0%");
}

TEST(ClassifyBoundTest, FollowsItsThresholds) {
  AnalysisOptions o;
  o.bound_memory_dram = 0.95;
  o.bound_compute_tensor = 0.90;
  o.bound_compute_sm = 0.95;
  o.bound_launch_kernel_ns = 100'000;
  EXPECT_EQ(Classified(Measured("k", 0.1, 50'000, 0.90, 0.82, 0.91), o).bound, "launch");
  EXPECT_EQ(Classified(Measured("k", 0.1, 500'000, 0.90, 0.82, 0.91), o).bound, "latency");
}

TEST(ClassifyBoundTest, NotMeasuredLeavesItEmpty) {
  // No samples covered the kernel: counters alone say nothing.
  KernelRow none = Measured("k", 0.1, 2'000, 0.18, 0.9, 0.9);
  none.counter_time_ns = 0;
  none.bound = "stale";
  none.bound_reason = "stale";
  ClassifyBound({}, &none);
  EXPECT_EQ(none.bound, "");
  EXPECT_EQ(none.bound_reason, "");
  // A class by elimination needs SMs, tensor pipes and DRAM all measured.
  EXPECT_EQ(Classified(Measured("k", 0.1, 2'000, kNaN, 0.0, 0.05)).bound, "");
  EXPECT_EQ(Classified(Measured("k", 0.1, 80'000, 0.5, kNaN, 0.05)).bound, "");
  EXPECT_EQ(Classified(Measured("k", 0.1, 80'000, 0.9, 0.0, kNaN)).bound, "");
  EXPECT_EQ(Classified(Measured("k", 0.1, 80'000, kNaN, kNaN, kNaN)).bound_reason, "");
  // What a measured counter shows stands on its own.
  EXPECT_EQ(Classified(Measured("k", 0.1, 80'000, kNaN, kNaN, 0.8)).bound, "memory");
  KernelRow tensor = Classified(Measured("k", 0.1, 80'000, kNaN, 0.6, kNaN));
  EXPECT_EQ(tensor.bound, "compute");
  EXPECT_EQ(tensor.bound_reason, "tensor pipes 60.0% busy");
}

// The finding `id` that BuildFindings gives for these kernel rows, classified; nullopt if silent.
std::optional<Finding> FindingOf(const std::vector<KernelRow>& rows, const std::string& id,
                                 uint64_t samples = 0) {
  Report r;
  r.kernel_time_ns = 1'000'000'000;
  r.counter_samples = samples;
  r.counter_interval_ns = 10'000'000;
  std::vector<KernelRow> classified;
  for (const KernelRow& k : rows) classified.push_back(Classified(k));
  for (Finding& f : BuildFindings(r, classified, {})) {
    if (f.id == id) return std::move(f);
  }
  return std::nullopt;
}

TEST(FindingsTest, KernelBoundNamesWhatLimitsTheTopKernels) {
  KernelRow elementwise = Measured("vectorized_elementwise_kernel", 0.2, 50'000, 0.9, 0.0, 0.91);
  elementwise.counters[GpuCounterFromTraceName("dram_read_bytes_per_second")] = 2.6e12;
  elementwise.counters[GpuCounterFromTraceName("dram_write_bytes_per_second")] = 1.3e12;
  elementwise.counter_time_ns = elementwise.stats.total_ns / 2;
  std::optional<Finding> f =
      FindingOf({Measured("sm90_xmma_gemm_bf16", 0.4, 200'000, 0.95, 0.82, 0.12), elementwise,
                 Measured("add_kernel", 0.1, 2'100, 0.18, 0.0, 0.05),
                 Measured("scan", 0.05, 80'000, 0.65, 0.03, 0.20, 0.12)},
                "kernel_bound", 1234);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->severity, "info");  // 35% of kernel time not compute-bound
  EXPECT_NEAR(f->value, 0.35, 1e-9);
  EXPECT_EQ(f->title,
            "What bounds the top 4 kernels (hardware counters): compute 40.0%, memory 20.0%, "
            "launch 10.0%, latency 5.0% of kernel time");
  EXPECT_THAT(f->threshold, HasSubstr("compute if tensor pipes >= 40.0%"));
  EXPECT_THAT(f->threshold, HasSubstr("memory if DRAM >= 60.0% of peak"));
  EXPECT_THAT(f->threshold, HasSubstr("launch if median < 10.0 µs"));
  EXPECT_THAT(
      f->evidence,
      ElementsAre(
          "sm90_xmma_gemm_bf16 (40.0% of kernel time): tensor pipes 82.0% busy, DRAM 12.0% of "
          "peak → compute-bound, fine",
          "vectorized_elementwise_kernel (20.0% of kernel time, counters over 50.0% of its "
          "time): DRAM 91.0% of peak (3900.0 GB/s) → memory-bound: fuse it with its neighbours",
          "add_kernel (10.0% of kernel time): median 2.1 µs, SMs active 18.0% → launch-bound: "
          "batch the work or capture it in a CUDA graph",
          "scan (5.0% of kernel time): SMs active 65.0%, tensor 3.0%, DRAM 20.0%, occupancy "
          "12.0% → latency-bound: more blocks/warps, fewer dependent stalls",
          "from 1,234 hardware counter samples of 10.00 ms each"));
  ASSERT_EQ(f->advice.size(), 4u);
  EXPECT_THAT(f->advice[0], HasSubstr("fuse them"));
  EXPECT_THAT(f->advice[1], HasSubstr("CUDA Graph"));
  EXPECT_THAT(f->advice[2], HasSubstr("more blocks and warps"));
  EXPECT_THAT(f->advice[3], HasSubstr("kernels running at the same time share them"));
}

TEST(FindingsTest, KernelBoundWarnsWhenMostTimeIsNotComputeBound) {
  std::optional<Finding> f = FindingOf({Measured("layer_norm", 0.6, 50'000, 0.9, 0.0, 0.8),
                                        Measured("gemm", 0.4, 200'000, 0.95, 0.82, 0.12)},
                                       "kernel_bound");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->severity, "warning");
  EXPECT_NEAR(f->value, 0.6, 1e-9);
  // All compute-bound: told so, as information.
  f = FindingOf({Measured("gemm", 1.0, 200'000, 0.95, 0.82, 0.12)}, "kernel_bound");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->severity, "info");
  EXPECT_THAT(f->advice[0], HasSubstr("limited by the math pipes"));
}

TEST(FindingsTest, KernelBoundListsAtMostFiveKernelsCoveringMostTime) {
  // The top kernel has no counters: skipped; then five of 10% each, the rest left off.
  KernelRow unmeasured = Measured("unmeasured", 0.3, 200'000, 0.9, 0.9, 0.1);
  unmeasured.counter_time_ns = 0;
  std::vector<KernelRow> rows = {unmeasured};
  for (int i = 0; i < 7; ++i) {
    rows.push_back(Measured("k" + std::to_string(i), 0.1, 200'000, 0.95, 0.82, 0.12));
  }
  std::optional<Finding> f = FindingOf(rows, "kernel_bound");
  ASSERT_TRUE(f.has_value());
  ASSERT_EQ(f->evidence.size(), 5u);
  EXPECT_THAT(f->evidence[0], HasSubstr("k0 ("));
  EXPECT_THAT(f->evidence[4], HasSubstr("k4 ("));
  // Stops once the listed kernels hold 80% of kernel time.
  f = FindingOf({Measured("a", 0.85, 200'000, 0.95, 0.82, 0.12),
                 Measured("b", 0.1, 200'000, 0.95, 0.82, 0.12)},
                "kernel_bound");
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->evidence.size(), 1u);
}

TEST(FindingsTest, KernelBoundSilentWithoutCounters) {
  KernelRow k = Measured("gemm", 1.0, 200'000, 0.95, 0.82, 0.12);
  k.counter_time_ns = 0;
  EXPECT_FALSE(FindingOf({k}, "kernel_bound").has_value());
  // Nor does a trace taken without --gpu-metrics get it.
  EXPECT_EQ(Find(ReportOf(Periodic(20, 60, 100, 2)), "kernel_bound"), nullptr);
}

TEST(FindingsTest, LowOccupancyPrefersTheMeasuredOccupancy) {
  // Estimated 90%, measured 10%: low, and said to be measured.
  KernelRow low = Measured("gemm", 0.6, 200'000, 0.9, 0.5, 0.1, 0.10);
  low.est_occupancy = 0.9;
  low.theoretical_occupancy = 1.0;
  low.occupancy_limiter = "warps";
  std::optional<Finding> f = FindingOf({low}, "low_occupancy");
  ASSERT_TRUE(f.has_value());
  EXPECT_THAT(f->title, HasSubstr("1 kernels with occupancy below 25.0%"));
  EXPECT_THAT(f->evidence[0], HasSubstr("gemm: measured 10.0% (est. 90.0%)"));
  EXPECT_THAT(f->threshold, HasSubstr("measured (else est.) achieved occupancy < 25.0%"));
  // Estimated 10%, measured 90%: not low.
  KernelRow high = Measured("gemm", 0.6, 200'000, 0.9, 0.5, 0.1, 0.90);
  high.est_occupancy = 0.1;
  EXPECT_FALSE(FindingOf({high}, "low_occupancy").has_value());
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
