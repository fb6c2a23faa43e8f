// A trace cut anywhere (its profd killed mid-capture) is repaired into one every reader takes:
// the readable prefix of its gzip, closed after its last whole event, saying it was cut. A whole
// trace is left untouched. The traces are the writer's own, fed with the recorded fixture.
#include "daemon/trace/trace_repair.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/trace/chrome_trace_writer.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/subprocess.h"

namespace profd {
namespace {

using testing::ReadGzipJson;
using testing::ReadRecordedBatches;
using testing::SourcePath;
using testing::TempDir;

constexpr char kFixture[] = "tests/fixtures/burst_1000_kernels.batches.pb";
constexpr char kWhy[] = "profd stopped before the capture was finished";

TraceProcess Process() {
  TraceProcess process;
  process.pid = 465;
  process.comm = "cuda_workload";
  process.capture_id = "20270115T080000Z-node-00000001";
  return process;
}

// The whole trace the writer makes of the fixture, compressed.
std::string WholeTrace(const TempDir& dir) {
  const std::string path = dir.File("whole.json.gz");
  auto writer = ChromeTraceWriter::Create(path, Process());
  EXPECT_TRUE(writer.ok());
  StringTable names;
  for (const v1::EventBatch& b : ReadRecordedBatches(SourcePath(kFixture))) {
    names.Add(b);
    EXPECT_TRUE((*writer)->Write(b, names).ok());
  }
  EXPECT_TRUE((*writer)->Finish({}).ok());
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(TraceRepairTest, TraceCutAnywhereReadsAndSaysItWasCut) {
  TempDir dir;
  const std::string whole = WholeTrace(dir);
  ASSERT_GT(whole.size(), 1000u);
  uint64_t previous = 0;
  for (double share : {0.0, 0.001, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}) {
    SCOPED_TRACE(share);
    const std::string path = dir.File("trace-465.json.gz");
    WriteFile(path,
              whole.substr(0, static_cast<size_t>(share * static_cast<double>(whole.size()))));
    absl::StatusOr<TraceRepair> repair = RepairTrace(path, Process(), kWhy);
    ASSERT_TRUE(repair.ok()) << repair.status();
    EXPECT_TRUE(repair->repaired);
    EXPECT_GE(repair->events, previous) << "a longer prefix keeps at least as many events";
    previous = repair->events;
    rapidjson::Document trace = ReadGzipJson(path);  // throws unless gzip and JSON are whole
    ASSERT_TRUE(trace.IsObject());
    EXPECT_EQ(trace["traceEvents"].Size(), repair->events);
    EXPECT_TRUE(trace["profd"]["truncated"].GetBool());
    EXPECT_STREQ(trace["profd"]["error"].GetString(), kWhy);
    EXPECT_STREQ(trace["profd"]["capture_id"].GetString(), Process().capture_id.c_str());
    EXPECT_FALSE(std::filesystem::exists(path + ".repair"));
  }
  EXPECT_GT(previous, 1000u) << "most of the trace survives a cut near its end";
}

TEST(TraceRepairTest, WholeTraceIsLeftAsItIs) {
  TempDir dir;
  const std::string whole = WholeTrace(dir);
  const std::string path = dir.File("trace-465.json.gz");
  WriteFile(path, whole);
  absl::StatusOr<TraceRepair> repair = RepairTrace(path, Process(), kWhy);
  ASSERT_TRUE(repair.ok()) << repair.status();
  EXPECT_FALSE(repair->repaired);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  EXPECT_EQ(bytes.str(), whole);
}

TEST(TraceRepairTest, WholeGzipOfAnotherFormatIsLeftAsItIs) {
  TempDir dir;
  const std::string path = dir.File("trace-465.json.gz");
  gzFile f = gzopen(path.c_str(), "wb");
  const std::string kineto = "{\n  \"traceEvents\": [\n  {\n    \"ph\": \"X\"\n  }\n]}\n";
  gzwrite(f, kineto.data(), static_cast<unsigned>(kineto.size()));
  gzclose(f);
  EXPECT_TRUE(GzipIsWhole(path));
  absl::StatusOr<TraceRepair> repair = RepairTrace(path, Process(), kWhy);
  ASSERT_TRUE(repair.ok()) << repair.status();
  EXPECT_FALSE(repair->repaired);
  EXPECT_EQ(ReadGzipJson(path)["traceEvents"].Size(), 1u);
  // Cut: no longer whole.
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  WriteFile(path, bytes.str().substr(0, bytes.str().size() - 4));
  EXPECT_FALSE(GzipIsWhole(path));
  EXPECT_FALSE(GzipIsWhole(dir.File("none.json.gz")));
}

TEST(TraceRepairTest, GarbageBecomesAnEmptyTraceThatSaysWhy) {
  TempDir dir;
  const std::string path = dir.File("trace-465.json.gz");
  WriteFile(path, "not a gzip stream at all");
  absl::StatusOr<TraceRepair> repair = RepairTrace(path, Process(), kWhy);
  ASSERT_TRUE(repair.ok()) << repair.status();
  rapidjson::Document trace = ReadGzipJson(path);
  EXPECT_EQ(trace["traceEvents"].Size(), 0u);
  EXPECT_TRUE(trace["profd"]["truncated"].GetBool());
}

TEST(TraceRepairTest, MissingTraceIsNotFound) {
  TempDir dir;
  EXPECT_TRUE(absl::IsNotFound(RepairTrace(dir.File("none.json.gz"), Process(), kWhy).status()));
}

// A full disk says so (issue 13: the error named the file, not the cause). /dev/full answers
// every write with ENOSPC.
TEST(TraceWriterDiskFullTest, FullDiskIsReportedAsDiskFull) {
  auto writer = ChromeTraceWriter::Create("/dev/full", Process());
  ASSERT_TRUE(writer.ok()) << writer.status();
  StringTable names;
  absl::Status status;
  for (const v1::EventBatch& b : ReadRecordedBatches(SourcePath(kFixture))) {
    names.Add(b);
    if (status.ok()) status = (*writer)->Write(b, names);
  }
  absl::Status finished = (*writer)->Finish({});
  if (status.ok()) status = finished;
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_NE(status.message().find("disk full (ENOSPC"), std::string::npos) << status;
}

}  // namespace
}  // namespace profd
