// The capture's report made as its batches arrive (CaptureAnalysis) is the report of its trace
// file read back (`profctl report FILE`): same numbers, in memory bounded by the streaming
// analysis's limits, whatever the capture's size.
#include "daemon/trace/capture_analysis.h"

#include <algorithm>
#include <random>

#include "analysis/analysis.h"
#include "daemon/trace/chrome_trace_writer.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::ReadRecordedBatches;
using testing::SourcePath;
using testing::TempDir;

// The report as JSON without its inputs (their byte counts are the JSON's, which only the file
// path knows).
std::string WithoutInputs(const analysis::Report& report) {
  analysis::Report r = report;
  r.inputs.clear();
  return analysis::ReportToJson(r);
}

struct Capture {
  std::vector<v1::EventBatch> batches;
  int64_t base_time_ns = 0;
};

Capture Recorded() {
  Capture c;
  c.batches = ReadRecordedBatches(SourcePath("tests/fixtures/burst_1000_kernels.batches.pb"));
  c.base_time_ns = static_cast<int64_t>(c.batches[0].clock().realtime_ns()) / 1000000 * 1000000;
  return c;
}

// The batches through the trace writer and back through the reader.
analysis::Report ReadBack(const Capture& c, const std::string& path) {
  TraceProcess process;
  process.pid = 4242;
  process.base_time_ns = c.base_time_ns;
  auto writer = ChromeTraceWriter::Create(path, process, 1);
  EXPECT_TRUE(writer.ok());
  StringTable names;
  for (const v1::EventBatch& b : c.batches) {
    names.Add(b);
    EXPECT_TRUE((*writer)->Write(b, names).ok());
  }
  ChromeTraceWriter::Footer footer;
  footer.devices.assign(c.batches.back().devices().begin(), c.batches.back().devices().end());
  for (const v1::EventBatch& b : c.batches) {
    if (b.devices_size() > 0) footer.devices.assign(b.devices().begin(), b.devices().end());
  }
  EXPECT_TRUE((*writer)->Finish(footer).ok());
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeTraceFiles({path});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : analysis::Report{};
}

analysis::Report Streamed(const std::vector<v1::EventBatch>& batches, int64_t base_time_ns,
                          const std::string& path, const analysis::StreamLimits& limits = {}) {
  CaptureAnalysis analysis(base_time_ns, {}, limits);
  size_t p = analysis.AddProcess(4242, path);
  StringTable names;
  for (const v1::EventBatch& b : batches) {
    names.Add(b);
    analysis.AddBatch(p, b, names);
  }
  return analysis.Finish();
}

TEST(CaptureAnalysisTest, TheReportIsTheTraceFilesReadBack) {
  TempDir dir;
  Capture c = Recorded();
  const std::string path = dir.File("trace-4242.json.gz");
  analysis::Report streamed = Streamed(c.batches, c.base_time_ns, path);
  analysis::Report read = ReadBack(c, path);
  EXPECT_EQ(streamed.events, 2008u);
  EXPECT_EQ(read.events, 2008u);
  EXPECT_EQ(streamed.kernel_count, 1000u);
  EXPECT_EQ(WithoutInputs(streamed), WithoutInputs(read));
}

// A Perfetto trace read back (daemon/trace/perfetto_trace_reader.h: how a capture repaired after
// its profd was killed gets its report) gives the report its batches gave, event for event: the
// recorded capture, and a batch of every kind of event at the edges of what is possible.
TEST(CaptureAnalysisTest, ThePerfettoTraceReadBackGivesTheSameReport) {
  TempDir dir;
  const uint64_t t0 = 1764520000123456789;
  v1::EventBatch second = testing::EveryKindOfEvent(t0 + 1000000);
  second.clear_strings();  // ids from the first batch still name its events
  const Capture every_kind{{testing::EveryKindOfEvent(t0), second},
                           static_cast<int64_t>(t0 - 1000)};
  for (const Capture& c : {Recorded(), every_kind}) {
    const std::string path = dir.File("trace-4242.pftrace.gz");
    TraceProcess process;
    process.pid = 4242;
    process.base_time_ns = c.base_time_ns;
    auto writer = TraceWriter::Create(TraceFormat::kPerfetto, path, process);
    ASSERT_TRUE(writer.ok());
    StringTable names;
    TraceWriter::Footer footer;
    for (const v1::EventBatch& b : c.batches) {
      names.Add(b);
      ASSERT_TRUE((*writer)->Write(b, names).ok());
      if (b.devices_size() > 0) footer.devices.assign(b.devices().begin(), b.devices().end());
    }
    ASSERT_TRUE((*writer)->Finish(footer).ok());
    analysis::Report streamed = Streamed(c.batches, c.base_time_ns, path);
    absl::StatusOr<analysis::Report> read = AnalyzeWrittenTraces({{path, TraceFormat::kPerfetto}});
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_GT(read->events, 0u);
    EXPECT_EQ(read->events, streamed.events);
    EXPECT_EQ(WithoutInputs(*read), WithoutInputs(streamed));
  }
}

// An agent's batches interleave streams and API calls: events arriving out of start order
// within the reorder window are analysed as if in order.
TEST(CaptureAnalysisTest, EventsOutOfOrderWithinTheWindowGiveTheSameReport) {
  TempDir dir;
  Capture c = Recorded();
  // Every record in its own batch, strings first, then in a shuffled order.
  std::vector<v1::EventBatch> split;
  v1::EventBatch strings;
  for (const v1::EventBatch& b : c.batches) {
    *strings.mutable_strings() = b.strings();
    strings.mutable_devices()->MergeFrom(b.devices());
  }
  for (const v1::EventBatch& b : c.batches) {
    for (const auto& k : b.kernels()) *split.emplace_back().add_kernels() = k;
    for (const auto& a : b.api_calls()) *split.emplace_back().add_api_calls() = a;
    for (const auto& m : b.memcpys()) *split.emplace_back().add_memcpys() = m;
    for (const auto& m : b.memsets()) *split.emplace_back().add_memsets() = m;
    for (const auto& s : b.syncs()) *split.emplace_back().add_syncs() = s;
  }
  std::mt19937 rng(7);
  std::shuffle(split.begin(), split.end(), rng);
  split.insert(split.begin(), strings);
  const std::string path = dir.File("trace-4242.json.gz");
  analysis::Report in_order = Streamed(c.batches, c.base_time_ns, path);
  analysis::Report shuffled = Streamed(split, c.base_time_ns, path);
  EXPECT_EQ(WithoutInputs(shuffled), WithoutInputs(in_order));
}

// A synthetic launch-bound loop far longer than the limits: the state stays within them, the
// exact numbers stay exact, and the medians are read from histograms within their 0.4 %.
TEST(StreamingAnalysisTest, MemoryIsBoundedByTheLimitsNotByTheEvents) {
  analysis::Trace tables;
  const uint32_t launch = tables.names.Intern("cudaLaunchKernel");
  const uint32_t kernel = tables.names.Intern("tiny_kernel");
  tables.files.push_back({"synthetic", "profd", false, 0, 0, 0, 7});
  analysis::StreamLimits limits;
  limits.reorder_window_ns = 1'000'000;  // 1 ms
  limits.max_buffered_events = 4096;
  limits.launch_memory_ns = 1'000'000;
  limits.max_launch_calls = 8192;
  limits.exact_samples = 10'000;
  analysis::StreamingAnalysis analysis(&tables, {}, limits);
  // 1,000,000 kernels of 1.5..2.5 µs, one every 4 µs, each launched 3 µs before it starts; the
  // agent delivers them in batches of 1000, the kernels of a batch before its API calls.
  constexpr int kKernels = 1'000'000;
  size_t max_buffered = 0, max_launches = 0;
  for (int batch = 0; batch < kKernels / 1000; ++batch) {
    std::vector<analysis::GpuActivity> kernels;
    for (int i = batch * 1000; i < (batch + 1) * 1000; ++i) {
      const int64_t t = int64_t{4000} * i;
      analysis::HostCall c;
      c.start_ns = t - 3000;
      c.dur_ns = 1000;
      c.correlation = i;
      c.name = launch;
      c.pid = 7;
      c.tid = 7;
      analysis::GpuActivity k;
      k.start_ns = t;
      k.dur_ns = 1500 + (i % 1001);
      k.correlation = i;
      k.name = kernel;
      kernels.push_back(k);
      analysis.Add(c);
      tables.Cover(c.start_ns, k.end_ns());
    }
    for (const auto& k : kernels) analysis.Add(k);
    max_buffered = std::max(max_buffered, analysis.buffered_events());
    max_launches = std::max(max_launches, analysis.remembered_launches());
  }
  EXPECT_LE(max_buffered, limits.max_buffered_events + 1);
  EXPECT_LE(max_launches, 2 * 1000 + 1000 + 250);  // 1 ms of launches + a batch in flight
  analysis::Report r = analysis.Finish();
  ASSERT_EQ(r.gpus.size(), 1u);
  const analysis::GpuRow& g = r.gpus[0];
  EXPECT_EQ(g.kernels, static_cast<uint64_t>(kKernels));
  EXPECT_EQ(g.kernels_with_launch, static_cast<uint64_t>(kKernels));
  EXPECT_EQ(analysis.late_events(), 0u);
  int64_t busy = 0;
  for (int i = 0; i < kKernels; ++i) busy += 1500 + (i % 1001);
  EXPECT_EQ(g.busy_ns, busy);
  EXPECT_EQ(r.top_kernels[0].stats.total_ns, busy);
  EXPECT_EQ(r.top_kernels[0].stats.min_ns, 1500);
  EXPECT_EQ(r.top_kernels[0].stats.max_ns, 2500);
  // Median 2000 ns, launch delay 2000 ns for all: from the histograms.
  EXPECT_NEAR(r.top_kernels[0].stats.median_ns, 2000, 2000 * 0.004);
  EXPECT_NEAR(g.launch_delay_p50_ns, 2000, 2000 * 0.004);
  // The next launch (1 µs after a kernel starts) comes before that kernel ends (1.5..2.5 µs).
  EXPECT_EQ(r.queues.at(0).max_depth, 2u);
  bool noted = false;
  for (const std::string& n : r.notes) noted |= n.find("histograms") != n.npos;
  EXPECT_TRUE(noted);
}

// An event arriving after later-starting ones were analysed is counted, and the report says so.
TEST(StreamingAnalysisTest, LateEventsAreCountedAndNoted) {
  analysis::Trace tables;
  const uint32_t kernel = tables.names.Intern("k");
  tables.files.push_back({"synthetic", "profd", false, 0, 0, 0, 1});
  analysis::StreamLimits limits;
  limits.reorder_window_ns = 1000;
  analysis::StreamingAnalysis analysis(&tables, {}, limits);
  auto add = [&](int64_t start) {
    analysis::GpuActivity k;
    k.start_ns = start;
    k.dur_ns = 10;
    k.name = kernel;
    tables.Cover(start, start + 10);
    analysis.Add(k);
  };
  add(0);
  add(5000);  // analyses the one at 0
  add(9000);  // analyses the one at 5000
  add(100);   // before 5000: late
  analysis::Report r = analysis.Finish();
  EXPECT_EQ(analysis.late_events(), 1u);
  EXPECT_EQ(r.kernel_count, 4u);
  bool noted = false;
  for (const std::string& n : r.notes) noted |= n.find("reorder window") != n.npos;
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace profd
