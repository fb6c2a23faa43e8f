// Known-answer tests of the report's numbers: each trace is small enough that the expected
// values are worked out by hand in the comments.
#include <cmath>
#include <limits>

#include "analysis/analysis.h"
#include "analysis/findings.h"
#include "analysis/render.h"
#include "analysis/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/analysis/kineto_trace_builder.h"

namespace profd::analysis {
namespace {

using ::testing::HasSubstr;
using testing::KinetoTraceBuilder;
using ::testing::Not;

Report ReportOf(const KinetoTraceBuilder& b, const AnalysisOptions& o = {}) {
  Trace t;
  absl::Status s = ReadTraceBuffer(b.Json(), "test", &t);
  EXPECT_TRUE(s.ok()) << s;
  return Analyze(t, o);
}

// One GPU, one stream, a 100 µs window:
//   CPU op      [0, 100]                 (sets the window)
//   K1 launch   [10, 15]   kernel [20, 30]   delay 5
//   K2 launch   [16, 20]   kernel [32, 42]   delay 12
//   copy call   [40, 41]   HtoD pinned [42, 44], 100 kB
//   K3 launch   [50, 57]   kernel [60, 65]   delay 3   (shorter than its 7 µs launch)
//   K4 launch   [58, 59]   kernel [96, 100]  delay 37
// Idle gaps:  [0,20]  K1 launched at 10 > 0       -> host wait 20
//             [30,32] K2 launched at 16 <= 30, 2 < 30 µs -> kernel wait 2
//             [44,60] K3 launched at 50 > 44      -> host wait 16
//             [65,96] K4 launched at 58 <= 65, 31 >= 30 -> other 31
KinetoTraceBuilder TimelineTrace() {
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 100);
  b.Launch("K1", 10, 5, 20, 10);
  b.Launch("K2", 16, 4, 32, 10);
  b.Copy("HtoD", "Pinned", "Device", 40, 1, 42, 2, 100'000);
  b.Launch("K3", 50, 7, 60, 5);
  b.Launch("K4", 58, 1, 96, 4);
  return b;
}

TEST(AnalyzerTest, BusyIdleSplitLaunchDelayAndQueueDepth) {
  Report r = ReportOf(TimelineTrace());
  EXPECT_EQ(r.window_ns, 100'000);
  ASSERT_EQ(r.gpus.size(), 1u);
  const GpuRow& g = r.gpus[0];
  EXPECT_EQ(g.pid, 100);
  EXPECT_EQ(g.device, 0);
  EXPECT_EQ(g.kernels, 4u);
  EXPECT_EQ(g.memcpys, 1u);
  EXPECT_EQ(g.busy_ns, 29'000);  // 10 + 10 + 5 + 4
  EXPECT_DOUBLE_EQ(g.busy_ratio, 0.29);
  EXPECT_EQ(g.copy_only_ns, 2'000);
  EXPECT_EQ(g.idle_ns, 69'000);
  EXPECT_EQ(g.idle.host_wait_ns, 36'000);
  EXPECT_EQ(g.idle.kernel_wait_ns, 2'000);
  EXPECT_EQ(g.idle.other_ns, 31'000);
  EXPECT_DOUBLE_EQ(g.launch_rate_per_s, 40'000);  // 4 kernels in 100 µs
  EXPECT_DOUBLE_EQ(g.median_kernel_ns, 7'500);    // (5 + 10) / 2
  EXPECT_EQ(g.kernels_with_launch, 4u);
  EXPECT_EQ(g.kernels_shorter_than_launch, 1u);
  // Delays sorted 3, 5, 12, 37; nearest rank: p50 = 2nd, p90 = p99 = 4th.
  EXPECT_EQ(g.launch_delay_p50_ns, 5'000);
  EXPECT_EQ(g.launch_delay_p90_ns, 37'000);
  EXPECT_EQ(g.launch_delay_p99_ns, 37'000);
  EXPECT_EQ(r.launch_delay_p50_ns, 5'000);
  uint64_t in_histogram = 0;
  for (const HistogramBin& b : r.launch_delay_histogram) in_histogram += b.count;
  EXPECT_EQ(in_histogram, 4u);
  // 2-5 µs: 3; 5-10 µs: 5; 10-20 µs: 12; 20-50 µs: 37.
  EXPECT_EQ(r.launch_delay_histogram[2].count, 1u);
  EXPECT_EQ(r.launch_delay_histogram[3].count, 1u);
  EXPECT_EQ(r.launch_delay_histogram[4].count, 1u);
  EXPECT_EQ(r.launch_delay_histogram[5].count, 1u);

  // Queue on stream 7: +1@10 +1@16 -1@30 -1@42 +1@50 +1@58 -1@65 -1@100
  // depth x time = 6x1 + 14x2 + 12x1 + 8x0 + 8x1 + 7x2 + 35x1 = 103 µs over a 100 µs window.
  ASSERT_EQ(r.queues.size(), 1u);
  EXPECT_EQ(r.queues[0].stream, 7);
  EXPECT_EQ(r.queues[0].max_depth, 2u);
  EXPECT_NEAR(r.queues[0].avg_depth, 1.03, 1e-9);

  // Busy timeline: 120 bins; the first bin (0-0.83 µs) is idle, the one over 20-30 µs busy.
  ASSERT_EQ(g.busy_timeline.size(), 120u);
  EXPECT_DOUBLE_EQ(g.busy_timeline[0], 0.0);
  EXPECT_NEAR(g.busy_timeline[30], 1.0, 1e-9);  // 25-25.8 µs
  double busy = 0;
  for (double v : g.busy_timeline) busy += v;
  EXPECT_NEAR(busy / 120, 0.29, 1e-9);

  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].kind, "HtoD");
  EXPECT_EQ(r.copies[0].memory, "Pinned");
  EXPECT_EQ(r.copies[0].bytes, 100'000u);
  EXPECT_EQ(r.copies[0].total_ns, 2'000);
  EXPECT_DOUBLE_EQ(r.copies[0].bandwidth_gbps, 50.0);  // 100 kB / 2 µs
}

TEST(AnalyzerTest, KernelAndApiSummariesHaveNsysColumns) {
  KinetoTraceBuilder b;
  double t = 0;
  for (double d : {10.0, 40.0, 20.0, 30.0}) {
    b.Launch("gemm", t, 2, t + 3, d);
    t += 50;
  }
  for (double d : {1.0, 3.0, 2.0}) {
    b.Launch("relu", t, 4, t + 5, d);
    t += 50;
  }
  Report r = ReportOf(b);
  EXPECT_EQ(r.kernel_count, 7u);
  EXPECT_EQ(r.kernel_time_ns, 106'000);
  EXPECT_EQ(r.distinct_kernels, 2u);
  ASSERT_EQ(r.top_kernels.size(), 2u);
  const KernelRow& gemm = r.top_kernels[0];
  EXPECT_EQ(gemm.name, "gemm");
  EXPECT_EQ(gemm.stats.count, 4u);
  EXPECT_EQ(gemm.stats.total_ns, 100'000);
  EXPECT_DOUBLE_EQ(gemm.stats.avg_ns, 25'000);
  EXPECT_DOUBLE_EQ(gemm.stats.median_ns, 25'000);  // (20 + 30) / 2
  EXPECT_EQ(gemm.stats.min_ns, 10'000);
  EXPECT_EQ(gemm.stats.max_ns, 40'000);
  // Sample stddev: sqrt((15² + 5² + 5² + 15²) / 3) µs.
  EXPECT_NEAR(gemm.stats.stddev_ns, std::sqrt(500.0 / 3) * 1000, 1e-6);
  EXPECT_NEAR(gemm.time_ratio, 100.0 / 106, 1e-12);
  const KernelRow& relu = r.top_kernels[1];
  EXPECT_DOUBLE_EQ(relu.stats.median_ns, 2'000);
  EXPECT_NEAR(relu.stats.stddev_ns, 1'000, 1e-6);

  ASSERT_EQ(r.apis.size(), 1u);
  EXPECT_EQ(r.apis[0].name, "cudaLaunchKernel");
  EXPECT_EQ(r.apis[0].stats.count, 7u);
  EXPECT_EQ(r.apis[0].stats.total_ns, 4 * 2'000 + 3 * 4'000);
  EXPECT_DOUBLE_EQ(r.apis[0].stats.median_ns, 2'000);
  EXPECT_DOUBLE_EQ(r.apis[0].time_ratio, 1.0);
}

TEST(AnalyzerTest, SynchronizationByKindAndHostBlockedTime) {
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 1000);
  b.Runtime("cudaStreamSynchronize", 100, 40);
  b.Runtime("cuStreamSynchronize_v2", 101, 38);  // the driver call inside it: not counted twice
  b.Runtime("cudaDeviceSynchronize", 300, 100);
  b.Runtime("cudaLaunchKernel", 500, 5);
  // A pageable DtoH copy blocks the host for the whole call (the .item() pattern).
  b.Copy("DtoH", "Device", "Pageable", 600, 60, 650, 8, 4);
  b.SyncRecord("Stream Sync", 100, 40);
  Report r = ReportOf(b);
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].sync_ns, 40'000 + 100'000 + 60'000);
  std::map<std::string, SyncRow> by_kind;
  for (const SyncRow& s : r.syncs) by_kind[s.kind + "/" + s.source] = s;
  EXPECT_EQ(by_kind["cudaStreamSynchronize/api"].total_ns, 40'000);
  EXPECT_EQ(by_kind["cuStreamSynchronize/api"].count, 1u);
  EXPECT_EQ(by_kind["cudaDeviceSynchronize/api"].max_ns, 100'000);
  EXPECT_EQ(by_kind["cudaMemcpyAsync (pageable copy)/api"].total_ns, 60'000);
  EXPECT_EQ(by_kind["Stream Sync/activity"].count, 1u);
  EXPECT_EQ(by_kind.count("cudaLaunchKernel/api"), 0u);
}

TEST(AnalyzerTest, SyncRecordsAloneGiveHostBlockedTime) {
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 1000);
  b.SyncRecord("Context Sync", 100, 50);
  b.SyncRecord("Stream Wait Event", 300, 50);  // a GPU-side wait: the host is not blocked
  Report r = ReportOf(b);
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_EQ(r.processes[0].sync_ns, 50'000);
}

TEST(AnalyzerTest, GpuOnlyTraceSaysWhatItCannotKnow) {
  KinetoTraceBuilder b;
  b.Kernel("k", 0, 10);
  b.Kernel("k", 50, 10);
  Report r = ReportOf(b);
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].kernels_with_launch, 0u);
  EXPECT_EQ(r.gpus[0].idle.other_ns, 40'000);
  EXPECT_THAT(r.notes, ::testing::Contains(::testing::HasSubstr("no launch call")));
  EXPECT_THAT(r.notes, ::testing::Contains(::testing::HasSubstr("deviceProperties absent")));
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_TRUE(r.devices[0].assumed);
}

TEST(AnalyzerTest, SeveralGpusAndStreams) {
  KinetoTraceBuilder b;
  b.CpuOp("step", 0, 100);
  b.Launch("a", 1, 1, 10, 20, /*device=*/0, /*stream=*/7);
  b.Launch("b", 2, 1, 20, 20, /*device=*/0, /*stream=*/8);  // overlaps a: union 10-40
  b.Launch("c", 3, 1, 50, 50, /*device=*/1, /*stream=*/7);
  b.DeviceProperties(0);
  b.DeviceProperties(1);
  Report r = ReportOf(b);
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].busy_ns, 30'000);
  EXPECT_EQ(r.gpus[1].busy_ns, 50'000);
  EXPECT_EQ(r.queues.size(), 3u);
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_THAT(r.processes[0].devices, ::testing::ElementsAre(0, 1));
  EXPECT_EQ(r.devices.size(), 2u);
  EXPECT_FALSE(r.devices[0].assumed);
}

TEST(AnalyzerTest, JsonCarriesTheNumbers) {
  Report r = ReportOf(TimelineTrace());
  std::string json = ReportToJson(r);
  rapidjson::Document d;
  ASSERT_FALSE(d.Parse(json.c_str()).HasParseError()) << json;
  EXPECT_EQ(d["schema_version"].GetInt(), 1);
  EXPECT_EQ(d["window_ns"].GetInt64(), 100'000);
  const auto& gpu = d["gpus"][0];
  EXPECT_EQ(gpu["busy_ns"].GetInt64(), 29'000);
  EXPECT_EQ(gpu["idle"]["host_wait_ns"].GetInt64(), 36'000);
  EXPECT_EQ(gpu["launch_delay_ns"]["p50"].GetInt64(), 5'000);
  EXPECT_EQ(d["top_kernels"].Size(), 4u);
  EXPECT_TRUE(d["top_kernels"][0].HasMember("med_ns"));
  EXPECT_TRUE(d["top_kernels"][0].HasMember("stddev_ns"));
  EXPECT_EQ(d["copies"][0]["bandwidth_gbps"].GetDouble(), 50.0);
  EXPECT_TRUE(d["thresholds"].HasMember("idle_busy_below"));
  EXPECT_TRUE(d["findings"].IsArray());
}

// TimelineTrace's report as a capture with --gpu-metrics leaves it: K1 measured in full (memory-
// bound), K2 with the DRAM counter missing, K3 and K4 without samples.
Report WithCounters() {
  Report r = ReportOf(TimelineTrace());
  r.counter_samples = 12;
  r.counter_interval_ns = 10'000;
  for (KernelRow& k : r.top_kernels) {
    auto set = [&k](const char* name, double v) { k.counters[GpuCounterFromTraceName(name)] = v; };
    if (k.name == "K1") {
      k.counter_time_ns = 10'000;
      set("sm_active_ratio", 0.53);
      set("sm_occupancy_ratio", 0.31);
      set("tensor_active_ratio", 0.0);
      set("dram_active_ratio", 0.91);
      set("dram_read_bytes_per_second", 2.6e12);
      set("dram_write_bytes_per_second", 1.3e12);
    } else if (k.name == "K2") {
      k.counter_time_ns = 5'000;
      set("sm_active_ratio", 0.2);
      set("tensor_active_ratio", 0.1);
    }
    ClassifyBound(r.options, &k);
  }
  r.findings = BuildFindings(r, r.top_kernels, r.options);
  return r;
}

const KernelRow& Kernel(const Report& r, const std::string& name) {
  for (const KernelRow& k : r.top_kernels) {
    if (k.name == name) return k;
  }
  ADD_FAILURE() << "no kernel " << name;
  return r.top_kernels.front();
}

TEST(AnalyzerTest, KernelsWithoutCountersKeepTheNsysTable) {
  Report r = ReportOf(TimelineTrace());
  for (const KernelRow& k : r.top_kernels) {
    EXPECT_EQ(k.counter_time_ns, 0);
    EXPECT_TRUE(std::isnan(k.counters[GpuCounterFromTraceName("sm_active_ratio")]));
    EXPECT_EQ(k.bound, "");
  }
  std::string text = RenderText(r);
  EXPECT_THAT(text, HasSubstr("Est. Occ  Name"));
  EXPECT_THAT(text, Not(HasSubstr("Bound")));
  EXPECT_THAT(RenderHtml(r, "t"), Not(HasSubstr("<th>Bound</th>")));
  rapidjson::Document d;
  ASSERT_FALSE(d.Parse(ReportToJson(r).c_str()).HasParseError());
  EXPECT_EQ(d["counter_samples"].GetUint64(), 0u);
  const auto& k = d["top_kernels"][0];
  EXPECT_FALSE(k.HasMember("counters"));
  EXPECT_EQ(k["counter_time_ns"].GetInt64(), 0);
  EXPECT_STREQ(k["bound"].GetString(), "");
}

TEST(AnalyzerTest, TextReportShowsCountersBoundAndMeasuredOccupancy) {
  Report r = WithCounters();
  ASSERT_EQ(Kernel(r, "K1").bound, "memory");
  std::string text = RenderText(r);
  EXPECT_THAT(text, HasSubstr("StdDev     Occ     SM  Tensor   DRAM  Bound   Name"));
  // K1: measured occupancy, counters, bound. K2: estimate marked "~", DRAM not measured, no
  // bound. K3: no counters at all.
  EXPECT_THAT(text, HasSubstr("  31.0%  53.0%    0.0%  91.0%  memory  K1\n"));
  EXPECT_THAT(text, HasSubstr(" ~12.5%  20.0%   10.0%      -  -       K2\n"));
  EXPECT_THAT(text, HasSubstr(" ~12.5%      -       -      -  -       K3\n"));
  EXPECT_THAT(text, HasSubstr("Occ: measured (sm_occupancy_ratio), ~ estimated"));
  EXPECT_THAT(text, HasSubstr("(12 samples of 10.0 µs)"));
  EXPECT_THAT(text, HasSubstr("- K1 (34.5% of kernel time): DRAM 91.0% of peak (3900.0 GB/s) → "
                              "memory-bound: fuse it with its neighbours\n"));

  std::string html = RenderHtml(r, "t");
  EXPECT_THAT(
      html,
      HasSubstr(
          "<th><a class=\"def\" "
          "href=\"#def-occupancy\">Occupancy</a></th><th>Limiter</th><th>SM</th><th>Tensor</th>"
          "<th>DRAM</th><th>Bound</th>"));
  EXPECT_THAT(html, HasSubstr("<td>31.0%</td>"));
  EXPECT_THAT(html, HasSubstr("<td>53.0%</td><td>0.0%</td><td>91.0%</td><td>memory</td>"));
  EXPECT_THAT(html, HasSubstr("<td>~12.5%</td><td>grid</td><td>20.0%</td><td>10.0%</td><td>-</td>"
                              "<td>-</td>"));
}

TEST(AnalyzerTest, JsonCarriesTheMeasuredCountersOnly) {
  Report r = WithCounters();
  rapidjson::Document d;
  std::string json = ReportToJson(r);
  ASSERT_FALSE(d.Parse(json.c_str()).HasParseError()) << json;
  EXPECT_EQ(d["counter_samples"].GetUint64(), 12u);
  EXPECT_EQ(d["counter_interval_ns"].GetInt64(), 10'000);
  EXPECT_EQ(d["thresholds"]["bound_memory_dram"].GetDouble(), 0.60);
  EXPECT_EQ(d["thresholds"]["bound_launch_kernel_ns"].GetInt64(), 10'000);
  for (const auto& k : d["top_kernels"].GetArray()) {
    std::string name = k["name"].GetString();
    if (name == "K1") {
      const auto& c = k["counters"];
      EXPECT_EQ(c.MemberCount(), 6u);
      EXPECT_DOUBLE_EQ(c["sm_active_ratio"].GetDouble(), 0.53);
      EXPECT_DOUBLE_EQ(c["sm_occupancy_ratio"].GetDouble(), 0.31);
      EXPECT_DOUBLE_EQ(c["dram_read_bytes_per_second"].GetDouble(), 2.6e12);
      EXPECT_FALSE(c.HasMember("pcie_rx_bytes_per_second"));
      EXPECT_EQ(k["counter_time_ns"].GetInt64(), 10'000);
      EXPECT_STREQ(k["bound"].GetString(), "memory");
      EXPECT_STREQ(k["bound_reason"].GetString(), "DRAM 91.0% of peak (3900.0 GB/s)");
    } else if (name == "K2") {
      EXPECT_EQ(k["counters"].MemberCount(), 2u);
      EXPECT_FALSE(k["counters"].HasMember("dram_active_ratio"));
      EXPECT_STREQ(k["bound"].GetString(), "");
    } else {
      EXPECT_FALSE(k.HasMember("counters")) << name;
      EXPECT_EQ(k["counter_time_ns"].GetInt64(), 0) << name;
    }
  }
}

}  // namespace
}  // namespace profd::analysis
