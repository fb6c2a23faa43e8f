// The trace writer's output, event by event, against traces it wrote before
// (tests/trace/testdata/): the recorded H200 capture, and one batch with every kind of event and
// the values at the edges (names to escape, unknown ids and enums, times before the base and past
// 2^62, zero durations). Changes to the writer's speed must leave every event, field and value as
// they were. Numbers are compared as the text written, so 1234.567 stays 1234.567 to the last
// digit; object members may come in any order, events may not.
//
// After a deliberate change of the format, write new golden files with
//   PROFD_UPDATE_GOLDEN=1 build/tests/trace/chrome_trace_writer_golden_test
// and say in the commit what changed.
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "daemon/trace/chrome_trace_writer.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::EveryKindOfEvent;
using testing::ReadFileOrEmpty;
using testing::ReadRecordedBatches;
using testing::SourcePath;
using testing::TempDir;

constexpr char kFixture[] = "tests/fixtures/burst_1000_kernels.batches.pb";

std::string Gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

std::string Compact(const rapidjson::Value& v) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  v.Accept(w);
  return out.GetString();
}

// Writes the batches through a fresh writer; returns the path of the .json.gz.
std::string WriteTrace(const TempDir& dir, const std::string& name, const TraceProcess& process,
                       const std::vector<v1::EventBatch>& batches,
                       const ChromeTraceWriter::Footer& footer) {
  std::string path = dir.File(name);
  auto writer = ChromeTraceWriter::Create(path, process);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (!writer.ok()) return path;
  StringTable names;
  for (const auto& b : batches) {
    names.Add(b);
    EXPECT_TRUE((*writer)->Write(b, names).ok());
  }
  EXPECT_TRUE((*writer)->Finish(footer).ok());
  return path;
}

// Compares the trace at path with tests/trace/testdata/<golden>, or replaces the golden file
// when PROFD_UPDATE_GOLDEN is set.
void ExpectSameAsGolden(const std::string& path, const std::string& golden) {
  std::string golden_path = SourcePath("tests/trace/testdata/" + golden);
  if (std::getenv("PROFD_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden_path, std::ios::binary) << ReadFileOrEmpty(path);
    GTEST_SKIP() << "wrote " << golden_path;
  }
  std::string want_text = Gunzip(golden_path);
  std::string got_text = Gunzip(path);
  ASSERT_FALSE(want_text.empty()) << "golden trace missing: " << golden_path;
  ASSERT_FALSE(got_text.empty()) << "the writer wrote nothing readable to " << path;
  rapidjson::Document want, got;
  want.Parse<rapidjson::kParseNumbersAsStringsFlag>(want_text.data(), want_text.size());
  got.Parse<rapidjson::kParseNumbersAsStringsFlag>(got_text.data(), got_text.size());
  ASSERT_FALSE(want.HasParseError()) << golden_path << " at " << want.GetErrorOffset();
  ASSERT_FALSE(got.HasParseError()) << "the writer's JSON, at byte " << got.GetErrorOffset() << ": "
                                    << got_text.substr(got.GetErrorOffset(), 200);
  const auto& want_events = want["traceEvents"].GetArray();
  const auto& got_events = got["traceEvents"].GetArray();
  ASSERT_EQ(got_events.Size(), want_events.Size());
  for (rapidjson::SizeType i = 0; i < want_events.Size(); ++i) {
    ASSERT_TRUE(got_events[i] == want_events[i])
        << "event " << i << "\n  want " << Compact(want_events[i]) << "\n  got  "
        << Compact(got_events[i]);
  }
  want.RemoveMember("traceEvents");
  got.RemoveMember("traceEvents");
  EXPECT_TRUE(got == want) << "\n  want " << Compact(want) << "\n  got  " << Compact(got);
}

TEST(ChromeTraceWriterGoldenTest, RecordedCaptureIsWrittenAsBefore) {
  std::vector<v1::EventBatch> batches = ReadRecordedBatches(SourcePath(kFixture));
  ASSERT_FALSE(batches.empty());
  TraceProcess process;
  process.pid = 465;
  process.comm = "cuda_workload";
  process.command_line = "cuda_workload burst --kernels 1000 --bytes 8388608";
  process.hostname = "h200-node";
  process.capture_id = "fixture";
  process.base_time_ns = static_cast<int64_t>(batches[0].clock().realtime_ns());
  ChromeTraceWriter::Footer footer;
  for (const auto& b : batches) {
    footer.devices.insert(footer.devices.end(), b.devices().begin(), b.devices().end());
  }
  TempDir dir;
  ExpectSameAsGolden(WriteTrace(dir, "trace.json.gz", process, batches, footer),
                     "burst_1000_kernels.golden.json.gz");
}

TEST(ChromeTraceWriterGoldenTest, EveryKindOfEventIsWrittenAsBefore) {
  const uint64_t t0 = 1764520000123456789;  // 2025-11-30, CLOCK_REALTIME ns
  TraceProcess process;
  process.pid = 4242;
  process.comm = "py\"thon\n";
  process.command_line = "python3 -c 'print(\"\\t\")'";
  process.hostname = "node-\x01";
  process.capture_id = "20261130T120000Z-node-0123abcd";
  process.pod_name = "trainer-0";
  process.pod_namespace = "ml";
  process.base_time_ns = static_cast<int64_t>(t0 - 1000);
  v1::EventBatch second = EveryKindOfEvent(t0 + 1000000);
  second.clear_strings();  // ids from the first batch still name its events
  ChromeTraceWriter::Footer footer;
  footer.dropped_records = 17;
  footer.truncated = true;
  footer.error = "agent gone: \"EOF\"";
  v1::DeviceInfo d;
  d.set_ordinal(1);
  d.set_name("NVIDIA H200");
  d.set_uuid("GPU-0123");
  d.set_compute_major(9);
  d.set_global_memory_bytes(uint64_t{143} << 30);
  footer.devices = {d, d};
  TempDir dir;
  ExpectSameAsGolden(
      WriteTrace(dir, "every.json.gz", process, {EveryKindOfEvent(t0), second}, footer),
      "every_kind_of_event.golden.json.gz");
}

// The base time at the ends of int64: ts saturates rather than wraps.
TEST(ChromeTraceWriterGoldenTest, ExtremeBaseTimesAreWrittenAsBefore) {
  TempDir dir;
  for (int64_t base : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    TraceProcess process;
    process.pid = 1;
    process.base_time_ns = base;
    std::string name = base < 0 ? "base_min" : "base_max";
    ExpectSameAsGolden(WriteTrace(dir, name + ".json.gz", process, {EveryKindOfEvent(1000)}, {}),
                       name + ".golden.json.gz");
  }
}

}  // namespace
}  // namespace profd
