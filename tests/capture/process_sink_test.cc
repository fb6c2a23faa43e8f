// One process's sink: the trace file starts with the first batch, the raw record keeps the
// batches as they came, the string table is bounded, and the counts are the batches' own.
#include "daemon/capture/process_sink.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace profd
