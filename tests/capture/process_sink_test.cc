// One process's sink: the trace file starts with the first batch, the raw record keeps the
// batches as they came, the string table is bounded, and the counts are the batches' own.
#include "daemon/capture/process_sink.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "analysis/analysis.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::ReadRecordedBatches;
using testing::SourcePath;
using testing::TempDir;

constexpr char kFixture[] = "tests/fixtures/burst_1000_kernels.batches.pb";

TraceProcess Process() {
  TraceProcess process;
  process.pid = 465;
  process.capture_id = "fixture";
  return process;
}

// A sink for pid 465 writing into a temporary capture folder, with the raw record on.
struct RecordingSink {
  RecordingSink()
      : folder(dir.path()), analysis(0), sink(Process(), {}, &folder, &analysis, With()) {}
  static ProcessSink::Options With() {
    ProcessSink::Options options;
    options.record_batches = true;
    return options;
  }

  TempDir dir;
  CaptureFolder folder;
  CaptureAnalysis analysis;
  ProcessSink sink;
};

uint64_t EventsIn(const v1::EventBatch& b) {
  return b.kernels_size() + b.memcpys_size() + b.memsets_size() + b.api_calls_size() +
         b.syncs_size() + b.memory_ops_size() + b.overheads_size() + b.markers_size();
}

TEST(ProcessSinkTest, BatchesGoToTheTraceTheRecordAndTheAnalysis) {
  RecordingSink recording;
  ProcessSink& sink = recording.sink;
  const TempDir& dir = recording.dir;
  EXPECT_FALSE(sink.has_trace());

  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  ASSERT_FALSE(batches.empty());
  uint64_t events = 0;
  for (v1::EventBatch& b : batches) {
    b.set_dropped_records(2);
    const std::string bytes = b.SerializeAsString();
    ASSERT_EQ(sink.ChargeStrings(b), "");
    ASSERT_TRUE(sink.Write(b, bytes, true).ok());
    events += EventsIn(b);
  }
  EXPECT_TRUE(sink.has_trace());
  EXPECT_EQ(sink.file_name(), "trace-465.json.gz");
  EXPECT_EQ(sink.events(), events);
  EXPECT_EQ(sink.dropped_records(), 2 * batches.size());
  ASSERT_TRUE(sink.FinishTrace(0, false, "").ok());
  EXPECT_FALSE(sink.has_trace());
  EXPECT_GT(std::filesystem::file_size(dir.File("trace-465.json.gz")), 0u);

  // The raw record reads back as the batches that came.
  std::vector<v1::EventBatch> recorded = ReadRecordedBatches(dir.File("batches-465.pb"));
  ASSERT_EQ(recorded.size(), batches.size());
  EXPECT_EQ(recorded.back().SerializeAsString(), batches.back().SerializeAsString());

  absl::StatusOr<analysis::Report> report = recording.analysis.Finish();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->kernel_count, 0u);
}

TEST(ProcessSinkTest, NoFileIsStartedOnceTheCaptureCannotWrite) {
  RecordingSink recording;
  ProcessSink& sink = recording.sink;
  const TempDir& dir = recording.dir;
  v1::EventBatch batch = ReadRecordedBatches(SourcePath(kFixture)).front();
  EXPECT_TRUE(sink.Write(batch, batch.SerializeAsString(), false).ok());
  EXPECT_FALSE(sink.has_trace());
  EXPECT_EQ(sink.events(), EventsIn(batch));  // still counted
  EXPECT_FALSE(std::filesystem::exists(dir.File("trace-465.json.gz")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("batches-465.pb")));
}

TEST(ProcessSinkTest, AFolderThatCannotBeWrittenIsAnError) {
  CaptureFolder folder("/proc/profd-no-such-folder");
  CaptureAnalysis analysis(0);
  ProcessSink sink(Process(), {}, &folder, &analysis, {});
  v1::EventBatch batch = ReadRecordedBatches(SourcePath(kFixture)).front();
  EXPECT_FALSE(sink.Write(batch, batch.SerializeAsString(), true).ok());
  EXPECT_FALSE(sink.has_trace());
}

TEST(ProcessSinkTest, StringsPastTheBoundRefuseTheBatch) {
  TempDir dir;
  CaptureFolder folder(dir.path());
  CaptureAnalysis analysis(0);
  ProcessSink::Options options;
  options.max_string_bytes = 1 << 20;
  ProcessSink sink(Process(), {}, &folder, &analysis, options);
  v1::EventBatch small;
  v1::StringDef* def = small.add_strings();
  def->set_id(1);
  def->set_value("kernel");
  EXPECT_EQ(sink.ChargeStrings(small), "");
  v1::EventBatch far;
  far.add_strings()->set_id(1u << 20);  // a slot per id up to the largest
  const std::string why = sink.ChargeStrings(far);
  EXPECT_NE(why.find("need more than 1 MiB"), std::string::npos) << why;
}

// profd keeps max_events to the event whatever the agent sends (issue 13: --max-events 1 kept
// a whole batch, 2,008 events).
TEST(ProcessSinkTest, CutKeepsMaxEventsToTheEventAcrossBatches) {
  RecordingSink recording;
  ProcessSink& sink = recording.sink;
  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  uint64_t all = 0;
  for (const v1::EventBatch& b : batches) all += EventsIn(b);
  const uint64_t max = all - 7;  // cuts inside the last batch, or the only one
  for (v1::EventBatch& b : batches) {
    const uint64_t before = EventsIn(b);
    const bool cut = sink.Cut(&b, max);
    EXPECT_EQ(cut, EventsIn(b) != before);
    ASSERT_TRUE(sink.Write(b, b.SerializeAsString(), true).ok());
  }
  EXPECT_EQ(sink.events(), max);
  v1::EventBatch more = ReadRecordedBatches(SourcePath(kFixture)).front();
  EXPECT_TRUE(sink.Cut(&more, max));
  EXPECT_EQ(EventsIn(more), 0u);
  v1::EventBatch unlimited = ReadRecordedBatches(SourcePath(kFixture)).front();
  EXPECT_FALSE(sink.Cut(&unlimited, 0));

  RecordingSink one;
  v1::EventBatch first = ReadRecordedBatches(SourcePath(kFixture)).front();
  EXPECT_TRUE(one.sink.Cut(&first, 1));
  EXPECT_EQ(EventsIn(first), 1u);
  EXPECT_EQ(first.kernels_size() + first.memcpys_size(), 1) << "kept in the batch's order";
}

// --gpu-metrics: one GPU's PM samples, back to back every 100 us over the recorded kernels, SMs
// 20 % active before `middle` and 80 % after, DRAM read 1e9 B/s throughout.
std::vector<GpuCounterReading> Readings(uint64_t first, uint64_t last, uint64_t middle) {
  std::vector<GpuCounterReading> readings;
  for (uint64_t t = first - first % 100'000; t < last; t += 100'000) {
    GpuCounterReading& r = readings.emplace_back();
    r.values.fill(std::numeric_limits<float>::quiet_NaN());
    r.start_ns = t;
    r.end_ns = t + 100'000;
    r.values[0] = t < middle ? 0.2f : 0.8f;  // sm_active_ratio
    r.values[5] = 1e9f;                      // dram_read_bytes_per_second
  }
  return readings;
}

// The counters of the GPU with the process's UUID go into its trace, on its row, and into the
// analysis: each kernel gets the overlap-weighted mean of the samples over its running time, and
// the report read back from the trace (profctl report FILE) says the same. Samples from before
// the first batch wait for it; another GPU's are left out.
TEST(ProcessSinkTest, CountersOfItsGpusGoToTheTraceAndEachKernel) {
  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  // The trace's times are relative to its base, exact to the ns when read back.
  const int64_t base = static_cast<int64_t>(batches[0].clock().realtime_ns()) / 1000000 * 1000000;
  TempDir dir;
  CaptureFolder folder(dir.path());
  CaptureAnalysis analysis(base);
  TraceProcess process = Process();
  process.base_time_ns = base;
  ProcessSink sink(process, {}, &folder, &analysis, {});
  std::string uuid;
  uint32_t ordinal = 0;
  uint64_t first = UINT64_MAX, last = 0;
  std::vector<std::pair<uint64_t, uint64_t>> kernels;
  for (const v1::EventBatch& b : batches) {
    for (const v1::DeviceInfo& d : b.devices()) uuid = d.uuid(), ordinal = d.ordinal();
    for (const v1::Kernel& k : b.kernels()) {
      kernels.emplace_back(k.start_ns(), k.end_ns());
      first = std::min<uint64_t>(first, k.start_ns());
      last = std::max<uint64_t>(last, k.end_ns());
    }
  }
  ASSERT_FALSE(uuid.empty());
  ASSERT_EQ(kernels.size(), 1000u);
  std::sort(kernels.begin(), kernels.end());
  const uint64_t middle = kernels[kernels.size() / 2].first;  // half the kernels on each side
  std::vector<GpuCounterReading> readings = Readings(first, last, middle);
  const size_t half = readings.size() / 2;
  GpuCounterBatch early{.cuda_index = 3, .uuid = uuid, .readings = {}};
  early.readings.assign(readings.begin(), readings.begin() + half);
  GpuCounterBatch late{.cuda_index = 3, .uuid = uuid, .readings = {}};
  late.readings.assign(readings.begin() + half, readings.end());
  GpuCounterBatch other{
      .cuda_index = 4, .uuid = "GPU-00000000-0000-0000-0000-000000000000", .readings = {}};
  other.readings = Readings(first, last, last);

  ASSERT_TRUE(sink.AddCounters(early).ok());  // before the trace exists: held
  for (const v1::EventBatch& b : batches)
    ASSERT_TRUE(sink.Write(b, b.SerializeAsString(), true).ok());
  ASSERT_TRUE(sink.AddCounters(late).ok());
  ASSERT_TRUE(sink.AddCounters(other).ok());
  ASSERT_TRUE(sink.FinishTrace(0, false, "").ok());

  // The kernels' expected SM activity, from the samples' definition (sample i covers
  // [start, start + 100 us)): every kernel's overlap with each.
  double weighted = 0, covered = 0;
  for (auto [start, end] : kernels) {
    for (const GpuCounterReading& r : readings) {
      const int64_t overlap = static_cast<int64_t>(std::min(end, r.end_ns)) -
                              static_cast<int64_t>(std::max(start, r.start_ns));
      if (overlap <= 0) continue;
      weighted += r.values[0] * static_cast<double>(overlap);
      covered += static_cast<double>(overlap);
    }
  }
  const double expected = weighted / covered;
  ASSERT_GT(expected, 0.3);
  ASSERT_LT(expected, 0.7);  // kernels on both sides of the middle

  analysis::Report streamed = analysis.Finish();
  ASSERT_EQ(streamed.top_kernels.size(), 1u);
  const analysis::KernelRow& k = streamed.top_kernels[0];
  EXPECT_NEAR(k.counters[0], expected, 1e-9);
  EXPECT_DOUBLE_EQ(k.counters[5], 1e9);
  EXPECT_TRUE(std::isnan(k.counters[2])) << "tensor pipes were not measured";
  EXPECT_EQ(k.counter_time_ns, static_cast<int64_t>(covered));
  EXPECT_EQ(streamed.counter_samples, readings.size());
  EXPECT_EQ(streamed.counter_interval_ns, 100'000);
  // The window is the events', not the samples' (which run past both ends).
  EXPECT_LE(streamed.window_ns, static_cast<int64_t>(last - first) + 10'000'000);

  // The trace: one counter event per sample of this GPU, on the process's row for it.
  rapidjson::Document doc;
  const std::string json = testing::ReadGzip(dir.File("trace-465.json.gz"));
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError());
  size_t counter_events = 0;
  for (const auto& e : doc["traceEvents"].GetArray()) {
    if (std::string(e["ph"].GetString()) != "C") continue;
    ++counter_events;
    EXPECT_STREQ(e["cat"].GetString(), "gpu_counters");
    EXPECT_EQ(e["pid"].GetUint(), ordinal);
    EXPECT_DOUBLE_EQ(e["dur"].GetDouble(), 100.0);
    EXPECT_TRUE(e["args"].HasMember("sm_active_ratio"));
    EXPECT_FALSE(e["args"].HasMember("tensor_active_ratio"));
  }
  EXPECT_EQ(counter_events, readings.size());

  // profctl report FILE: the same kernel counters, the same bound.
  absl::StatusOr<analysis::Report> read =
      analysis::AnalyzeTraceFiles({dir.File("trace-465.json.gz")});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->top_kernels.size(), 1u);
  for (size_t i = 0; i < kGpuCounters; ++i) {
    if (std::isnan(k.counters[i])) {
      EXPECT_TRUE(std::isnan(read->top_kernels[0].counters[i]));
    } else {
      EXPECT_DOUBLE_EQ(read->top_kernels[0].counters[i], k.counters[i]) << i;
    }
  }
  EXPECT_EQ(read->top_kernels[0].counter_time_ns, k.counter_time_ns);
  EXPECT_EQ(read->top_kernels[0].bound, k.bound);
  EXPECT_EQ(read->counter_samples, streamed.counter_samples);
}

}  // namespace
}  // namespace profd
